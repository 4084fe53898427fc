/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "message.h"
#include "options.h"
#include "output.h"
#include "tpd-protocol.h"
#include "units.h"
#include "varlink.h"

static CommonOptions common;

enum {
        ARG_SOCKET,
        ARG_QUIET,
        ARG_JSON,
        ARG_JSON_AUTO,
        ARG_NO_PAGER,
        ARG_NO_LEGEND,
        ARG_FILTER,
        ARG_EVENT,
        ARG_PID,
        ARG_CPU,
        ARG_PRINT,
        ARG_DURATION,
        ARG_FOLLOW,
        ARG_CGROUP,
        ARG_UNIT,
        ARG_BY,
        ARG_FORMAT,
        ARG_STACK,
};

static const OptionSpec common_specs[] = {
        { "socket", 0, required_argument, ARG_SOCKET },
        { "quiet", 'q', no_argument, ARG_QUIET },
        { "json", 0, optional_argument, ARG_JSON },
        { NULL, 'j', no_argument, ARG_JSON_AUTO },
        { "no-pager", 0, no_argument, ARG_NO_PAGER },
        { "no-legend", 0, no_argument, ARG_NO_LEGEND },
        { "filter", 'f', required_argument, ARG_FILTER, OPTION_FILTER },
        { "event", 'e', required_argument, ARG_EVENT, OPTION_EVENT },
        { "pid", 'p', required_argument, ARG_PID, OPTION_PID },
        { "cpu", 'c', required_argument, ARG_CPU, OPTION_CPU },
        { "print", 0, no_argument, ARG_PRINT, OPTION_PRINT },
        { "duration", 0, required_argument, ARG_DURATION, OPTION_DURATION },
        { "follow", 0, no_argument, ARG_FOLLOW, OPTION_FOLLOW },
        { "cgroup", 0, required_argument, ARG_CGROUP, OPTION_CGROUP },
        { "unit", 0, required_argument, ARG_UNIT, OPTION_CGROUP },
        { "by", 0, required_argument, ARG_BY, OPTION_BY },
        { "format", 0, required_argument, ARG_FORMAT, OPTION_FORMAT },
        { "stack", 0, no_argument, ARG_STACK, OPTION_STACK },
};

int parse_int(const char *s, int *ret) {
        char *end;
        long v;

        if (*s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtol(s, &end, 10);
        if (errno != 0 || *end || v > INT_MAX)
                return -EINVAL;
        *ret = (int) v;
        return 0;
}

int parse_u64(const char *s, uint64_t *ret) {
        char *end;
        unsigned long long v;

        if (*s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno != 0 || *end)
                return -EINVAL;
        *ret = v;
        return 0;
}

int parse_decimal(const char *s, double min, double max, double *ret) {
        char *end;
        double v;

        if ((*s < '0' || *s > '9') && *s != '.')
                return -EINVAL;
        errno = 0;
        v = strtod(s, &end);
        if (errno != 0 || end == s || *end || !(v >= min && v <= max))
                return -EINVAL;
        *ret = v;
        return 0;
}

int parse_seconds(const char *s, double *ret) {
        return parse_decimal(s, 1e-9, 366.0 * 24 * 3600, ret);
}

/* The same, in microseconds (at least 1). */
static int parse_duration_usec(const char *s, uint64_t *ret_usec) {
        double v;

        if (parse_seconds(s, &v) < 0)
                return -EINVAL;
        *ret_usec = MAX((uint64_t) (v * 1e6), (uint64_t) 1);
        return 0;
}

static int parse_json_mode(const char *arg) {
        /* Bare --json keeps its old meaning: pretty. */
        if (!arg || streq(arg, "pretty"))
                common.json = JSON_PRETTY;
        else if (streq(arg, "short"))
                common.json = JSON_SHORT;
        else if (streq(arg, "off"))
                common.json = JSON_OFF;
        else if (streq(arg, "help")) {
                puts("short\npretty\noff");
                return 1;
        } else
                return log_usage("unknown JSON mode '%s': short, pretty or off", arg);
        return 0;
}

static int common_parse_option(const OptionSpec *spec, const char *arg) {
        switch (spec->id) {
        case ARG_SOCKET:
                common.socket_path = arg;
                return 0;
        case ARG_QUIET:
                log_quiet = true;
                return 0;
        case ARG_JSON:
                return parse_json_mode(arg);
        case ARG_JSON_AUTO:
                /* As in systemd: for a person pretty, for a program short. */
                common.json = isatty(STDOUT_FILENO) ? JSON_PRETTY : JSON_SHORT;
                return 0;
        case ARG_NO_PAGER:
                common.no_pager = true;
                return 0;
        case ARG_NO_LEGEND:
                output_legend = false;
                return 0;
        case ARG_FILTER:
                common.filter = arg;
                return 0;
        case ARG_EVENT:
                common.events[common.n_events++] = (char *) arg;
                return 0;
        case ARG_PID:
                if (parse_int(arg, &common.pids[common.n_pids++]) < 0)
                        return log_usage("invalid PID '%s'", arg);
                return 0;
        case ARG_CPU:
                if (parse_int(arg, &common.cpus[common.n_cpus++]) < 0)
                        return log_usage("invalid CPU number '%s'", arg);
                return 0;
        case ARG_PRINT:
                common.print = true;
                return 0;
        case ARG_DURATION:
                if (parse_duration_usec(arg, &common.duration_usec) < 0)
                        return log_usage("invalid duration '%s': seconds, like 10 or 0.5", arg);
                return 0;
        case ARG_FOLLOW:
                common.follow = true;
                return 0;
        case ARG_CGROUP:
                common.cgroup = arg;
                return 0;
        case ARG_UNIT:
                common.unit = arg;
                return 0;
        case ARG_BY:
                common.by = arg;
                return 0;
        case ARG_FORMAT:
                common.format = arg;
                return 0;
        case ARG_STACK:
                common.stack = true;
                return 0;
        }
        return -EINVAL;
}

const OptionTable common_option_table = OPTION_TABLE(common_specs, common_parse_option);

int common_options_init(int argc) {
        common.events = calloc(argc, sizeof(*common.events));
        common.pids = calloc(argc, sizeof(*common.pids));
        common.cpus = calloc(argc, sizeof(*common.cpus));
        if (!common.events || !common.pids || !common.cpus)
                return log_oom();
        return 0;
}

static char *unit_cgroup_path;

void common_options_done(void) {
        free(common.events);
        free(common.pids);
        free(common.cpus);
        free(unit_cgroup_path);
}

int common_options_resolve_unit(void) {
        if (!common.unit)
                return 0;
        if (common.cgroup)
                return usage_error("--unit and --cgroup: the unit names the cgroup");
        if (unit_cgroup(common.unit, &unit_cgroup_path) < 0)
                return EXIT_FAILURE;
        common.cgroup = unit_cgroup_path;
        return 0;
}

CommonOptions common_options_following(const CommonOptions *c, const int *pid) {
        CommonOptions own = *c;

        own.pids = (int *) pid;
        own.n_pids = 1;
        own.follow = true;
        return own;
}

void common_options_set_command(char **argv, size_t n) {
        common.command = argv;
        common.n_command = n;
}

const CommonOptions *common_options(void) {
        if (!common.socket_path)
                common.socket_path = getenv(TPD_SOCKET_ENV);
        if (!common.socket_path || !*common.socket_path)
                common.socket_path = TPD_SOCKET_DEFAULT;
        return &common;
}

static int json_add_strings(json_object *o, const char *key, char *const *a, size_t n, char *const *b,
                            size_t m) {
        json_object *array = json_object_new_array_ext((int) (n + m));
        int r = json_add(o, key, array);

        for (size_t i = 0; r >= 0 && i < n + m; i++) {
                json_object *s = json_object_new_string(i < n ? a[i] : b[i - n]);

                if (!s || json_object_array_add(array, s) < 0) {
                        json_object_put(s);
                        r = -ENOMEM;
                }
        }
        return r;
}

static int json_add_ints(json_object *o, const char *key, const int *v, size_t n) {
        json_object *array = json_object_new_array_ext((int) n);
        int r = json_add(o, key, array);

        for (size_t i = 0; r >= 0 && i < n; i++) {
                json_object *j = json_object_new_int(v[i]);

                if (!j || json_object_array_add(array, j) < 0) {
                        json_object_put(j);
                        r = -ENOMEM;
                }
        }
        return r;
}

json_object *selection_params(const CommonOptions *c, char **args, size_t n) {
        json_object *params = json_object_new_object();

        if (!params ||
            (c->n_events + n > 0 &&
             json_add_strings(params, "events", c->events, c->n_events, args, n) < 0) ||
            (c->n_pids > 0 && json_add_ints(params, "pids", c->pids, c->n_pids) < 0) ||
            (c->n_cpus > 0 && json_add_ints(params, "cpus", c->cpus, c->n_cpus) < 0) ||
            (c->filter && json_add(params, "filter", json_object_new_string(c->filter)) < 0) ||
            (c->print && json_add(params, "print", json_object_new_boolean(true)) < 0) ||
            (c->follow && json_add(params, "follow", json_object_new_boolean(true)) < 0) ||
            (c->cgroup && json_add(params, "cgroup", json_object_new_string(c->cgroup)) < 0) ||
            (c->stack && json_add(params, "stack", json_object_new_boolean(true)) < 0)) {
                json_object_put(params);
                return NULL;
        }
        return params;
}
