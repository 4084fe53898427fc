/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "util.h"

/*
 * tpctl's options. Each command's room declares the options only it takes (an OptionTable of its
 * own, parsed into its own state); the ones several commands share are declared here once. tpctl.c
 * reads all tables in one getopt_long() pass, as an option may come before or after its command,
 * and refuses an option that does not apply to the command given.
 */

typedef struct OptionSpec {
        const char *name; /* the long option, without "--" */
        int short_name;   /* its letter, or 0 */
        int has_arg;      /* no_argument, required_argument or optional_argument */
        int id;           /* the room's own number for it */
        /* Shared options: the commands that take it, as an OPTION_* bit; 0 for every command. */
        unsigned applies;
        const char *shown; /* how "… does not apply to" names it; NULL: "--name" */
} OptionSpec;

typedef struct OptionTable {
        const OptionSpec *specs;
        size_t n_specs;
        /* Takes one option with its argument (NULL if it has none): 0, 1 to exit successfully at
         * once (--help), or a negative errno after printing a usage error. */
        int (*parse)(const OptionSpec *spec, const char *arg);
} OptionTable;

#define OPTION_TABLE(specs, parse) ((OptionTable){ (specs), ELEMENTSOF(specs), (parse) })

/* The shared options that only some commands take. */
enum {
        OPTION_FILTER = 1 << 0,
        OPTION_EVENT = 1 << 1,
        OPTION_PID = 1 << 2,
        OPTION_CPU = 1 << 3,
        OPTION_PRINT = 1 << 4,
        OPTION_DURATION = 1 << 5,
        OPTION_FOLLOW = 1 << 6,  /* the -p processes' descendants too: stream and record */
        OPTION_CGROUP = 1 << 7,  /* a cgroup's tasks (--cgroup, --unit): stream and record */
        OPTION_BY = 1 << 8,      /* what rows or groups sum: top and the aggregations, each its own values */
        OPTION_STACK = 1 << 9,   /* the kernel's stack of each record (--stack): stream and record */
        OPTION_FORMAT = 1 << 10, /* the format written: record, convert and stream, each its own */
        /* What stream, record, replay and export select records by. */
        OPTION_SELECTION = OPTION_EVENT | OPTION_PID | OPTION_CPU | OPTION_FILTER,
};

/* --json=MODE, as systemd's tools take it: off is text. */
typedef enum JsonMode {
        JSON_OFF,
        JSON_SHORT,
        JSON_PRETTY,
} JsonMode;

/* The shared options' values. */
typedef struct CommonOptions {
        const char *socket_path;
        JsonMode json;
        bool no_pager;
        const char *filter;
        char **events;
        size_t n_events;
        int *pids;
        size_t n_pids;
        int *cpus;
        size_t n_cpus;
        bool print;
        uint64_t duration_usec; /* 0: until interrupted */
        bool follow;            /* -p's processes and what they fork (Stream and Record "follow") */
        const char *cgroup;     /* the tasks of a cgroup v2 subtree (Stream and Record "cgroup") */
        bool stack;             /* each record's kernel stack (Stream and Record "stack") */
        const char *unit;       /* --unit: a systemd unit, whose cgroup becomes cgroup */
        char **command;         /* after "--": the command whose tasks a stream follows (command.h) */
        size_t n_command;
        const char *by;     /* --by, checked by the command that takes it */
        const char *format; /* --format, likewise */
} CommonOptions;

extern const OptionTable common_option_table;

/* Makes room for the lists of -e, -p and -c: argc bounds them. 0 or -ENOMEM. */
int common_options_init(int argc);
void common_options_done(void);
/* The selection of a command's stream or recording: c's, following *pid (the command's). */
CommonOptions common_options_following(const CommonOptions *c, const int *pid);
/* The words after the first "--" of the command line: a command to run. */
void common_options_set_command(char **argv, size_t n);
/* --unit's cgroup, asked of systemd (units.h). 0, or an exit status after printing why. */
int common_options_resolve_unit(void);
/* The shared options as given, the socket path from $TPD_SOCKET or the default if none was. */
const CommonOptions *common_options(void);

/* The Stream (or Record) parameters of the selection options and EVENT arguments: what stream,
 * record and export ask tpd for. Options a command does not take are refused before, so they are
 * unset here. NULL when out of memory. */
json_object *selection_params(const CommonOptions *c, char **args, size_t n);

/* Numbers of options: 0 or -EINVAL. */
int parse_int(const char *s, int *ret);
int parse_u64(const char *s, uint64_t *ret);
/* A decimal number ("10", "0.5", "1e-3") from min to max. */
int parse_decimal(const char *s, double min, double max, double *ret);
/* Positive seconds, fractions allowed, at most a year. */
int parse_seconds(const char *s, double *ret);
