/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "tracing.h"

typedef enum ConfigSection {
        SECTION_NONE,
        SECTION_TRACING,
        SECTION_CLIENTS,
        SECTION_UNKNOWN,
} ConfigSection;

bool config_instance_name_is_valid(const char *name) {
        /* The name becomes a directory under instances/: a plain name, never a path. */
        return *name && strlen(name) <= 64 && name[0] != '.' &&
               strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") == strlen(name);
}

static char *strip(char *s) {
        char *e;

        s += strspn(s, " \t");
        e = s + strlen(s);
        while (e > s && strchr(" \t\r\n", e[-1]))
                *--e = 0;
        return s;
}

int config_set_string(char **dst, const char *value) {
        char *s = strdup(value);
        if (!s)
                return -ENOMEM;
        free(*dst);
        *dst = s;
        return 0;
}

int config_parse_unsigned(const char *value, unsigned min, unsigned max, unsigned *ret) {
        char *end;
        unsigned long v;

        if (!*value || *value == '-' || *value == '+')
                return -EINVAL;
        errno = 0;
        v = strtoul(value, &end, 10);
        if (errno || *end || v < min || v > max)
                return -EINVAL;
        *ret = (unsigned) v;
        return 0;
}

static int strv_push(char ***l, char *s) {
        size_t n = strv_length(*l);
        char **nl = reallocarray(*l, n + 2, sizeof(char *));

        if (!nl) {
                free(s);
                return -ENOMEM;
        }
        nl[n] = s;
        nl[n + 1] = NULL;
        *l = nl;
        return 0;
}

static int parse_events(ManagerConfig *c, char *value, const char *path, unsigned line) {
        char *save = NULL;
        int r;

        if (!*value) {
                c->events = strv_free(c->events);
                c->events_origin = strv_free(c->events_origin);
                return 0;
        }
        for (char *w = strtok_r(value, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
                char *name, *origin;

                if (!tracing_event_name_is_valid(w) && !(tracing_is_glob(w) && strchr(w, ':'))) {
                        log_error("%s:%u: '%s' is not an event name (system:event, globs allowed).", path, line, w);
                        return -EINVAL;
                }
                name = strdup(w);
                if (!name || asprintf(&origin, "%s:%u", path, line) < 0) {
                        free(name);
                        return -ENOMEM;
                }
                r = strv_push(&c->events, name);
                if (r >= 0)
                        r = strv_push(&c->events_origin, origin);
                else
                        free(origin);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int assign(ManagerConfig *c, ConfigSection section, const char *key, char *value, const char *path,
                  unsigned line) {
        const char *what = NULL;
        int r = 0;

        switch (section) {
        case SECTION_TRACING:
                if (streq(key, "Events"))
                        return parse_events(c, value, path, line);
                if (streq(key, "Instance")) {
                        what = "an instance name of letters, digits, '_', '-' and '.'";
                        if (!config_instance_name_is_valid(value))
                                r = -EINVAL;
                        else
                                r = config_set_string(&c->instance, value);
                } else if (streq(key, "Clock")) {
                        what = "a trace clock name (see the instance's trace_clock)";
                        if (!tracing_clock_name_is_valid(value))
                                r = -EINVAL;
                        else
                                r = config_set_string(&c->clock, value);
                } else if (streq(key, "BufferSizeKB")) {
                        what = "a size in KiB from 4 to 4194304, or 0 for the kernel's default";
                        r = config_parse_unsigned(value, 0, 4U * 1024 * 1024, &c->buffer_size_kb);
                        if (r >= 0 && c->buffer_size_kb > 0 && c->buffer_size_kb < 4)
                                r = -EINVAL;
                } else if (streq(key, "FlushIntervalMSec")) {
                        what = "milliseconds from 1 to 60000";
                        r = config_parse_unsigned(value, 1, 60 * 1000, &c->flush_interval_ms);
                } else
                        goto unknown;
                break;

        case SECTION_CLIENTS:
                if (streq(key, "AccessGroup")) {
                        what = "a group name";
                        if (strpbrk(value, " \t:/"))
                                r = -EINVAL;
                        else
                                r = config_set_string(&c->access_group, value);
                } else if (streq(key, "MaxClients")) {
                        what = "a number from 1 to 65536";
                        r = config_parse_unsigned(value, 1, 65536, &c->max_clients);
                } else if (streq(key, "ClientQueueKB")) {
                        what = "a size in KiB from 64 to 1048576";
                        r = config_parse_unsigned(value, 64, 1024 * 1024, &c->client_queue_kb);
                } else if (streq(key, "MaxGlobEvents")) {
                        what = "a number of events from 1 to 65536";
                        r = config_parse_unsigned(value, 1, 65536, &c->max_glob_events);
                } else if (streq(key, "MaxCallEvents")) {
                        what = "a number of events from 1 to 4096";
                        r = config_parse_unsigned(value, 1, 4096, &c->max_call_events);
                } else if (streq(key, "MaxEnabledEvents")) {
                        what = "a number of events from 0 (no bound) to 65536";
                        r = config_parse_unsigned(value, 0, 65536, &c->max_enabled_events);
                } else
                        goto unknown;
                break;

        case SECTION_NONE:
                log_error("%s:%u: '%s=' outside of a section.", path, line, key);
                return -EINVAL;

        case SECTION_UNKNOWN:
                return 0;
        }

        if (r == -EINVAL) {
                log_error("%s:%u: invalid value '%s' for %s=: expected %s.", path, line, value, key, what);
                return r;
        }
        return r;

unknown:
        log_warning("%s:%u: unknown key '%s', ignoring.", path, line, key);
        return 0;
}

int config_parse_file(const char *path, ManagerConfig *c) {
        ConfigSection section = SECTION_NONE;
        _cleanup_free_ char *buf = NULL;
        size_t size = 0;
        unsigned line = 0;
        FILE *f;
        int r = 0;

        f = fopen(path, "re");
        if (!f) {
                if (errno == ENOENT)
                        return -ENOENT;
                return log_error_errno(negative_errno(), "Failed to open '%s': %m", path);
        }

        while (getline(&buf, &size, f) >= 0) {
                char *l = strip(buf), *eq, *key, *value;

                line++;
                if (!*l || *l == '#' || *l == ';')
                        continue;

                if (*l == '[') {
                        char *end = strchr(l, ']');
                        if (!end || end[1]) {
                                log_error("%s:%u: malformed section header '%s'.", path, line, l);
                                r = -EINVAL;
                                break;
                        }
                        *end = 0;
                        if (streq(l + 1, "Tracing"))
                                section = SECTION_TRACING;
                        else if (streq(l + 1, "Clients"))
                                section = SECTION_CLIENTS;
                        else {
                                log_warning("%s:%u: unknown section [%s], ignoring it.", path, line, l + 1);
                                section = SECTION_UNKNOWN;
                        }
                        continue;
                }

                eq = strchr(l, '=');
                if (!eq) {
                        log_error("%s:%u: expected Key=Value, got '%s'.", path, line, l);
                        r = -EINVAL;
                        break;
                }
                *eq = 0;
                key = strip(l);
                value = strip(eq + 1);
                if (!*key) {
                        log_error("%s:%u: missing key before '='.", path, line);
                        r = -EINVAL;
                        break;
                }
                r = assign(c, section, key, value, path, line);
                if (r < 0)
                        break;
        }
        fclose(f);
        return r;
}

static int is_conf(const struct dirent *d) {
        size_t n = strlen(d->d_name);
        return d->d_name[0] != '.' && n > 5 && streq(d->d_name + n - 5, ".conf");
}

int config_load(const char *path, ManagerConfig *c) {
        _cleanup_free_ char *dir = NULL;
        struct dirent **entries = NULL;
        int n, r;

        r = config_parse_file(path, c);
        if (r < 0 && r != -ENOENT)
                return r;

        if (asprintf(&dir, "%s.d", path) < 0)
                return -ENOMEM;
        /* alphasort: drop-ins apply in name order, so 50-x.conf overrides 10-y.conf. */
        n = scandir(dir, &entries, is_conf, alphasort);
        if (n < 0)
                return errno == ENOENT ? 0 : log_error_errno(negative_errno(), "Failed to read '%s': %m", dir);

        r = 0;
        for (int i = 0; i < n; i++) {
                _cleanup_free_ char *p = NULL;

                if (r >= 0) {
                        if (asprintf(&p, "%s/%s", dir, entries[i]->d_name) < 0)
                                r = -ENOMEM;
                        else {
                                r = config_parse_file(p, c);
                                if (r == -ENOENT) /* removed meanwhile */
                                        r = 0;
                        }
                }
                free(entries[i]);
        }
        free(entries);
        return r;
}
