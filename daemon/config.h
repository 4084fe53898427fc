/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "build-config.h"

/*
 * tpd's settings, each defined once in config_settings[] (config.c): its configuration key, its
 * command-line option, its Configure/GetStatus name, type, default, range and help text. The
 * options and --help, the configuration parser, Configure and GetStatus all read that table, so a
 * new setting is a Config field, a table row and its documentation (conf/tpd.conf and
 * conf/tpd.conf.5.scd, its one reference).
 *
 * The configuration files: /etc/tpd/tpd.conf, then the .conf files of /etc/tpd/tpd.conf.d/ in name
 * order, systemd style. Sections hold Key=Value lines; '#' and ';' start comments. A later
 * assignment wins; Events= accumulates (space-separated names or globs) and an empty Events=
 * resets the list. Unknown sections and keys are warned about and ignored; an invalid value is an
 * error that names the file and line. Options on the command line override both.
 */

#define CONFIG_FILE_DEFAULT TPD_SYSCONFDIR "/tpd/tpd.conf"

typedef struct Config {
        char *socket_path;
        char *instance;
        char *clock;
        unsigned buffer_size_kb; /* 0: keep the kernel's default */
        unsigned buffer_percent;
        bool buffer_overwrite; /* full buffer: overwrite the oldest records (else drop new ones) */
        unsigned flush_interval_ms;
        char *access_group;
        unsigned max_clients;              /* MaxStreams= */
        unsigned client_queue_kb;          /* StreamQueueKB= */
        char *decode_workers;              /* "auto", or threads that decode pages (0: the loop) */
        bool shm_transport;                /* streams may ask for the shared-memory rings */
        unsigned shm_ring_kb;              /* each ring's data (rounded down to a power of two) */
        unsigned max_connections_per_user; /* not for root, who also keeps the last slots */
        unsigned max_streams_per_user;
        unsigned max_glob_events;    /* a member's glob may match at most this many events */
        unsigned max_call_events;    /* a member's call may select at most this many events */
        unsigned max_enabled_events; /* tpd enables at most this many events (0: no bound) */
        bool symbolic;               /* streams add "sym" unless they say "symbolic":false */
        bool kernel_addresses;       /* members' recordings get printk_formats (kernel addresses) */
        char *state_dir;             /* pins are saved here; NULL: not saved */
        char **events;               /* Events=: pinned at every start */
        char **events_origin;        /* "file:line" of each, for error messages */
} Config;

typedef enum SettingType {
        SETTING_STRING,
        SETTING_UNSIGNED,
        SETTING_BOOL,
        SETTING_EVENTS, /* Events=: a list that accumulates */
} SettingType;

typedef struct Setting {
        const char *section; /* of the configuration file; NULL: command line only */
        const char *key;     /* NULL: command line only */
        const char *option;  /* long option without "--"; NULL: configuration only */
        const char *name;    /* in GetStatus "settings" and Configure parameters */
        const char *metavar; /* of the option, in --help */
        SettingType type;
        size_t offset; /* of the value in Config */
        unsigned min, max;
        bool zero_ok; /* 0 is allowed besides min..max (it means "the kernel's default") */
        bool runtime; /* Configure may change it while tpd runs */
        bool (*valid)(const char *value); /* strings: the check, NULL: any */
        const char *default_value;        /* as written in a configuration file; NULL: none */
        const char *expected;             /* what a valid value is, for error messages */
        const char *help;                 /* one line for --help */
        /* The key and option it had before, still read (with a notice that names the new one);
         * NULL: none. */
        const char *old_key;
        const char *old_option;
} Setting;

extern const Setting config_settings[];
extern const size_t config_n_settings;

/* The setting of key in section, by its key or its old key (*ret_old tells which; may be NULL). */
const Setting *config_setting_by_key(const char *section, const char *key, bool *ret_old);
const Setting *config_setting_by_name(const char *name);

/* Checks value and stores it in c. -EINVAL when invalid (nothing logged), -ENOMEM. */
int config_setting_set(const Setting *s, Config *c, const char *value);
/* The value in c as text, written to buf; "" for an unset string. */
const char *config_setting_format(const Setting *s, const Config *c, char *buf, size_t size);

/* Sets every setting to its default. */
int config_init(Config *c);
void config_done(Config *c);
int config_copy(Config *dst, const Config *src);

bool config_instance_name_is_valid(const char *name);

/* Parses one file into c. Returns 0, -ENOENT when it does not exist, or -EINVAL after logging
 * "file:line: reason". */
int config_parse_file(const char *path, Config *c);

/* Parses path and then its drop-in directory path.d/ (files ending in .conf). A missing main file
 * is fine: the defaults and drop-ins apply. */
int config_load(const char *path, Config *c);

/* DecodeWorkers=: 1 with *ret the fixed number of threads, 0 for "auto" (as the load needs), or
 * -EINVAL. */
#define CONFIG_DECODE_WORKERS_MAX 64U
int config_decode_workers(const char *value, unsigned *ret);
