/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <dirent.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "config.h"
#include "core/clock.h"
#include "core/names.h"
#include "log.h"
#include "tpd-protocol.h"

bool config_instance_name_is_valid(const char *name) {
        /* The name becomes a directory under instances/: a plain name, never a path. */
        return *name && strlen(name) <= 64 && name[0] != '.' &&
               strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") ==
                       strlen(name);
}

static bool group_name_is_valid(const char *name) {
        return *name && !strpbrk(name, " \t:/");
}

int config_decode_workers(const char *value, unsigned *ret) {
        char *end;
        unsigned long v;

        if (!value || streq(value, "auto"))
                return 0;
        if (*value < '0' || *value > '9')
                return -EINVAL;
        errno = 0;
        v = strtoul(value, &end, 10);
        if (errno || *end || v > CONFIG_DECODE_WORKERS_MAX)
                return -EINVAL;
        *ret = (unsigned) v;
        return 1;
}

static bool decode_workers_is_valid(const char *value) {
        unsigned n;
        return config_decode_workers(value, &n) >= 0;
}

static bool socket_path_is_valid(const char *path) {
        /* sockaddr_un's sun_path holds 107 bytes and a NUL. */
        return path[0] == '/' && strlen(path) < 108;
}

#define FIELD(f) offsetof(Config, f)

/* Readers wake when this share of the ring buffer holds full pages: 0 would wake on every event
 * (and make a blocking splice return at once), 50, the kernel's default, lets a slow stream wait
 * for half the buffer. At 10 (35 pages of the default 1410 KiB) each wake-up moves a batch large
 * enough that fan-out to 8 streams costs 1.5x one stream instead of 2.5x at 1 (tests/bench), and
 * the flush timer still delivers a slow stream within its interval. */
#define BUFFER_PERCENT_DEFAULT "10"
/* A stream's queue holds what a reader may take out of one CPU's full ring buffer in one go,
 * decoded: the kernel's default 1410 KiB holds 72,000 getppid records, 9.2 MB of JSON lines, and
 * the CPU writes more while they are read (12.3 MB measured after tpd was held up for 60 ms). */
#define STREAM_QUEUE_KB_DEFAULT "16384"

const Setting config_settings[] = {
        { NULL, NULL, "socket", "socket", "PATH", SETTING_STRING, FIELD(socket_path),
          .valid = socket_path_is_valid, .default_value = TPD_SOCKET_DEFAULT,
          .expected = "an absolute path of at most 107 bytes",
          .help = "Listen on PATH, unless systemd passes a socket" },
        { "Tracing", "Events", NULL, "events", NULL, SETTING_EVENTS, FIELD(events),
          .expected = "system:event names or globs", .help = "Events pinned at every start" },
        { "Tracing", "Instance", "instance", "instance", "NAME", SETTING_STRING, FIELD(instance),
          .valid = config_instance_name_is_valid, .default_value = "tpd",
          .expected = "an instance name of letters, digits, '_', '-' and '.'",
          .help = "Tracefs instance to create" },
        { "Tracing", "Clock", "clock", "clock", "CLOCK", SETTING_STRING, FIELD(clock), .runtime = true,
          .valid = trace_clock_name_is_valid, .default_value = "boot",
          .expected = "a trace clock name (see the instance's trace_clock)",
          .help = "Trace clock of \"ts\"" },
        { "Tracing", "BufferSizeKB", "buffer-size-kb", "buffer_size_kb", "KB", SETTING_UNSIGNED,
          FIELD(buffer_size_kb), 4, 4U * 1024 * 1024, .zero_ok = true, .runtime = true, .default_value = "0",
          .expected = "a size in KiB from 4 to 4194304, or 0 for the kernel's default",
          .help = "Ring buffer size per CPU; 0: the kernel's default" },
        { "Tracing", "BufferPercent", "buffer-percent", "buffer_percent", "N", SETTING_UNSIGNED,
          FIELD(buffer_percent), 1, 100, .default_value = BUFFER_PERCENT_DEFAULT,
          .expected = "a percentage from 1 to 100",
          .help = "Wake the readers when N % of the buffer is full" },
        { "Tracing", "BufferOverwrite", "buffer-overwrite", "buffer_overwrite", "BOOL", SETTING_BOOL,
          FIELD(buffer_overwrite), .default_value = "yes", .expected = "yes or no",
          .help = "When the buffer is full, overwrite the oldest records (lost as \"overrun\"); no: "
                  "drop new ones (\"dropped\")" },
        { "Tracing", "FlushIntervalMSec", "flush-interval-ms", "flush_interval_ms", "MS", SETTING_UNSIGNED,
          FIELD(flush_interval_ms), 1, 60 * 1000, .runtime = true, .default_value = "100",
          .expected = "milliseconds from 1 to 60000", .help = "Deliver partially filled pages after MS" },
        { "Tracing", "DecodeWorkers", "decode-workers", "decode_workers", "N", SETTING_STRING,
          FIELD(decode_workers), .valid = decode_workers_is_valid, .runtime = true, .default_value = "auto",
          .expected = "auto, or a number of threads from 0 to 64",
          .help = "Threads that decode the CPUs' pages; auto: as the load needs; 0: the event loop" },
        { "Clients", "AccessGroup", "access-group", "access_group", "GROUP", SETTING_STRING,
          FIELD(access_group), .valid = group_name_is_valid, .default_value = "tracing",
          .expected = "a group name", .help = "Group allowed besides root" },
        { "Clients", "MaxStreams", "max-streams", "max_clients", "N", SETTING_UNSIGNED, FIELD(max_clients),
          1, 65536, .default_value = "64", .expected = "a number from 1 to 65536",
          .help = "Streams served at once (connections: twice as many)", .old_key = "MaxClients",
          .old_option = "max-clients" },
        { "Clients", "StreamQueueKB", "stream-queue-kb", "client_queue_kb", "KB", SETTING_UNSIGNED,
          FIELD(client_queue_kb), 64, 1024 * 1024, .default_value = STREAM_QUEUE_KB_DEFAULT,
          .expected = "a size in KiB from 64 to 1048576",
          .help = "Memory a stream may hold before it loses records", .old_key = "ClientQueueKB",
          .old_option = "client-queue-kb" },
        { "Clients", "ShmTransport", "shm-transport", "shm_transport", "BOOL", SETTING_BOOL,
          FIELD(shm_transport), .default_value = "yes", .expected = "yes or no",
          .help = "Local streams that ask may read records from shared memory, written once for all" },
        { "Clients", "ShmRingKB", "shm-ring-kb", "shm_ring_kb", "KB", SETTING_UNSIGNED, FIELD(shm_ring_kb),
          8192, 1024 * 1024, .default_value = "32768",
          .expected = "a size in KiB from 8192 to 1048576 (rounded down to a power of two)",
          .help = "Shared-memory ring of each form of line that streams read" },
        { "Clients", "MaxConnectionsPerUser", "max-connections-per-user", "max_connections_per_user", "N",
          SETTING_UNSIGNED, FIELD(max_connections_per_user), 1, 2 * 65536, .default_value = "32",
          .expected = "a number from 1 to 131072", .help = "Connections one user other than root may hold" },
        { "Clients", "MaxStreamsPerUser", "max-streams-per-user", "max_streams_per_user", "N",
          SETTING_UNSIGNED, FIELD(max_streams_per_user), 1, 65536, .default_value = "16",
          .expected = "a number from 1 to 65536", .help = "Streams one user other than root may hold" },
        { "Clients", "MaxGlobEvents", "max-glob-events", "max_glob_events", "N", SETTING_UNSIGNED,
          FIELD(max_glob_events), 1, 65536, .default_value = "64",
          .expected = "a number of events from 1 to 65536",
          .help = "Events a member's glob may match (root's may match more)" },
        { "Clients", "MaxCallEvents", "max-call-events", "max_call_events", "N", SETTING_UNSIGNED,
          FIELD(max_call_events), 1, 4096, .default_value = "32",
          .expected = "a number of events from 1 to 4096",
          .help = "Events one call of a member may select" },
        { "Clients", "MaxEnabledEvents", "max-enabled-events", "max_enabled_events", "N", SETTING_UNSIGNED,
          FIELD(max_enabled_events), 0, 65536, .default_value = "1024",
          .expected = "a number of events from 0 (no bound) to 65536",
          .help = "Events tpd keeps enabled at most; 0: no bound" },
        { "Streams", "Symbolic", "symbolic", "symbolic", "BOOL", SETTING_BOOL, FIELD(symbolic),
          .default_value = "no", .expected = "yes or no",
          .help = "Streams add \"sym\", readable forms of flags, symbols, syscalls and errnos, unless "
                  "they ask otherwise" },
        { "Record", "KernelAddresses", "kernel-addresses", "kernel_addresses", "BOOL", SETTING_BOOL,
          FIELD(kernel_addresses), .default_value = "no", .expected = "yes or no",
          .help = "Members' recordings get printk_formats, which pairs kernel addresses with strings "
                  "(root's always do)" },
        { NULL, NULL, "state-dir", "state_dir", "DIR", SETTING_STRING, FIELD(state_dir),
          .expected = "a directory",
          .help = "Save pinned events here ($STATE_DIRECTORY, else /var/lib/tpd); "
                  "empty: do not save" },
};
const size_t config_n_settings = ELEMENTSOF(config_settings);

const Setting *config_setting_by_key(const char *section, const char *key, bool *ret_old) {
        for (size_t i = 0; i < config_n_settings; i++) {
                const Setting *s = &config_settings[i];
                bool old = s->old_key && streq(s->old_key, key);

                if (!s->key || !streq(s->section, section) || (!old && !streq(s->key, key)))
                        continue;
                if (ret_old)
                        *ret_old = old;
                return s;
        }
        return NULL;
}

const Setting *config_setting_by_name(const char *name) {
        for (size_t i = 0; i < config_n_settings; i++)
                if (streq(config_settings[i].name, name))
                        return &config_settings[i];
        return NULL;
}

static char *strip(char *s) {
        char *e;

        s += strspn(s, " \t");
        e = s + strlen(s);
        while (e > s && strchr(" \t\r\n", e[-1]))
                *--e = 0;
        return s;
}

static int set_string(char **dst, const char *value) {
        char *s = strdup(value);
        if (!s)
                return -ENOMEM;
        free(*dst);
        *dst = s;
        return 0;
}

static int parse_unsigned(const char *value, unsigned min, unsigned max, bool zero_ok, unsigned *ret) {
        char *end;
        unsigned long v;

        if (!*value || *value == '-' || *value == '+')
                return -EINVAL;
        errno = 0;
        v = strtoul(value, &end, 10);
        if (errno || *end || v > UINT_MAX || ((v < min || v > max) && !(zero_ok && v == 0)))
                return -EINVAL;
        *ret = (unsigned) v;
        return 0;
}

static int parse_bool(const char *value, bool *ret) {
        static const char *const yes[] = { "yes", "true", "on", "1" }, *const no[] = { "no", "false", "off",
                                                                                       "0" };

        for (size_t i = 0; i < ELEMENTSOF(yes); i++)
                if (strcasecmp(value, yes[i]) == 0 || strcasecmp(value, no[i]) == 0) {
                        *ret = strcasecmp(value, yes[i]) == 0;
                        return 0;
                }
        return -EINVAL;
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

static bool event_pattern_is_valid(const char *w) {
        return names_event_is_valid(w) || (names_is_glob(w) && strchr(w, ':'));
}

/* Events=: words accumulate, an empty value resets. On -EINVAL *ret_bad is the offending word. */
static int add_events(Config *c, const char *value, const char *origin, char **ret_bad) {
        _cleanup_free_ char *copy = NULL;
        char *save = NULL;
        int r;

        if (!*value) {
                c->events = strv_free(c->events);
                c->events_origin = strv_free(c->events_origin);
                return 0;
        }
        copy = strdup(value);
        if (!copy)
                return -ENOMEM;
        for (char *w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
                char *name, *o;

                if (!event_pattern_is_valid(w)) {
                        *ret_bad = strdup(w);
                        return *ret_bad ? -EINVAL : -ENOMEM;
                }
                name = strdup(w);
                o = strdup(origin);
                if (!name || !o) {
                        free(name);
                        free(o);
                        return -ENOMEM;
                }
                r = strv_push(&c->events, name);
                if (r >= 0)
                        r = strv_push(&c->events_origin, o);
                else
                        free(o);
                if (r < 0)
                        return r;
        }
        return 0;
}

int config_setting_set(const Setting *s, Config *c, const char *value) {
        void *p = (char *) c + s->offset;

        switch (s->type) {
        case SETTING_STRING:
                if (s->valid && !s->valid(value))
                        return -EINVAL;
                return set_string(p, value);
        case SETTING_UNSIGNED:
                return parse_unsigned(value, s->min, s->max, s->zero_ok, p);
        case SETTING_BOOL:
                return parse_bool(value, p);
        case SETTING_EVENTS: {
                _cleanup_free_ char *bad = NULL;
                return add_events(c, value, "command line", &bad);
        }
        }
        return -EINVAL;
}

const char *config_setting_format(const Setting *s, const Config *c, char *buf, size_t size) {
        const void *p = (const char *) c + s->offset;

        switch (s->type) {
        case SETTING_STRING:
                snprintf(buf, size, "%s", strempty(*(char *const *) p));
                break;
        case SETTING_UNSIGNED:
                snprintf(buf, size, "%u", *(const unsigned *) p);
                break;
        case SETTING_BOOL:
                snprintf(buf, size, "%s", *(const bool *) p ? "yes" : "no");
                break;
        case SETTING_EVENTS: {
                size_t n = 0;
                buf[0] = 0;
                for (char *const *e = *(char **const *) p; e && *e && n < size; e++)
                        n += (size_t) snprintf(buf + n, size - n, "%s%s", n > 0 ? " " : "", *e);
                break;
        }
        }
        return buf;
}

void config_done(Config *c) {
        for (size_t i = 0; i < config_n_settings; i++)
                if (config_settings[i].type == SETTING_STRING)
                        free(*(char **) ((char *) c + config_settings[i].offset));
        strv_free(c->events);
        strv_free(c->events_origin);
        *c = (Config){};
}

int config_init(Config *c) {
        *c = (Config){};
        for (size_t i = 0; i < config_n_settings; i++) {
                const Setting *s = &config_settings[i];
                int r;

                if (!s->default_value)
                        continue;
                r = config_setting_set(s, c, s->default_value);
                if (r < 0)
                        return r;
        }
        return 0;
}

static char **strv_copy(char *const *l) {
        size_t n = strv_length(l);
        char **copy = calloc(n + 1, sizeof(char *));

        for (size_t i = 0; copy && i < n; i++)
                if (!(copy[i] = strdup(l[i])))
                        copy = strv_free(copy);
        return copy;
}

int config_copy(Config *dst, const Config *src) {
        *dst = *src;
        /* Own copies of every pointer, or none: config_done() must be safe on failure. */
        for (size_t i = 0; i < config_n_settings; i++)
                if (config_settings[i].type == SETTING_STRING)
                        *(char **) ((char *) dst + config_settings[i].offset) = NULL;
        dst->events = dst->events_origin = NULL;

        for (size_t i = 0; i < config_n_settings; i++) {
                const Setting *s = &config_settings[i];
                const char *v;

                if (s->type != SETTING_STRING)
                        continue;
                v = *(char *const *) ((const char *) src + s->offset);
                if (v && set_string((char **) ((char *) dst + s->offset), v) < 0)
                        return -ENOMEM;
        }
        if (src->events) {
                dst->events = strv_copy(src->events);
                dst->events_origin = strv_copy(src->events_origin);
                if (!dst->events || !dst->events_origin)
                        return -ENOMEM;
        }
        return 0;
}

static int assign(Config *c, const char *section, const char *key, const char *value, const char *path,
                  unsigned line) {
        const Setting *s;
        _cleanup_free_ char *bad = NULL, *origin = NULL;
        bool old = false;
        int r;

        if (!section) {
                log_error("%s:%u: '%s=' outside of a section.", path, line, key);
                return -EINVAL;
        }
        s = config_setting_by_key(section, key, &old);
        if (!s) {
                log_warning("%s:%u: unknown key '%s', ignoring.", path, line, key);
                return 0;
        }
        if (old)
                log_notice("%s:%u: %s= is deprecated, use %s=", path, line, key, s->key);
        if (s->type == SETTING_EVENTS) {
                if (asprintf(&origin, "%s:%u", path, line) < 0)
                        return -ENOMEM;
                r = add_events(c, value, origin, &bad);
                if (r == -EINVAL)
                        log_error("%s:%u: '%s' is not an event name (system:event, globs allowed).", path,
                                  line, bad);
                return r;
        }
        r = config_setting_set(s, c, value);
        if (r == -EINVAL)
                log_error("%s:%u: invalid value '%s' for %s=: expected %s.", path, line, value, key,
                          s->expected);
        return r;
}

static bool section_is_known(const char *name) {
        for (size_t i = 0; i < config_n_settings; i++)
                if (config_settings[i].section && streq(config_settings[i].section, name))
                        return true;
        return false;
}

int config_parse_file(const char *path, Config *c) {
        _cleanup_free_ char *section = NULL;
        bool known = false;
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
                        free(section);
                        section = strdup(l + 1);
                        if (!section) {
                                r = -ENOMEM;
                                break;
                        }
                        known = section_is_known(section);
                        if (!known)
                                log_warning("%s:%u: unknown section [%s], ignoring it.", path, line,
                                            section);
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
                if (section && !known)
                        continue;
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

int config_load(const char *path, Config *c) {
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
                return errno == ENOENT ? 0
                                       : log_error_errno(negative_errno(), "Failed to read '%s': %m", dir);

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
