/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <systemd/sd-daemon.h>

#include "api.h"
#include "build-config.h"
#include "config.h"
#include "log.h"
#include "manager.h"
#include "tpd-protocol.h"
#include "tracing.h"

/* --help: options in the first column, their text from this column on, lines up to this width. */
#define HELP_COLUMN 29
#define HELP_WIDTH 100

static void help(void) {
        printf("Usage: tpd [OPTIONS]\n\n"
               "Serve Linux kernel tracepoints as JSON over Varlink.\n\n"
               "  -h --help                  Show this help\n"
               "     --version               Show the version\n"
               "     --config=PATH           Configuration file, and drop-ins in PATH.d/\n"
               "                             (default: %s)\n"
               "  -v --verbose               Log debug messages\n",
               CONFIG_FILE_DEFAULT);
        for (size_t i = 0; i < config_n_settings; i++) {
                const Setting *s = &config_settings[i];
                char option[64], def[64] = "";
                int col;

                if (!s->option)
                        continue;
                snprintf(option, sizeof(option), "--%s=%s", s->option, s->metavar);
                if (s->default_value)
                        snprintf(def, sizeof(def), " (default: %s)", s->default_value);
                if (strlen(option) + 6 > HELP_COLUMN)
                        col = printf("     %s\n%*s", option, HELP_COLUMN, "") - (int) strlen(option) - 6;
                else
                        col = printf("     %-*s", HELP_COLUMN - 5, option);
                col += printf("%s", s->help);
                if (*def && col + (int) strlen(def) > HELP_WIDTH)
                        printf("\n%*s%s\n", HELP_COLUMN, "", def + 1);
                else
                        printf("%s\n", def);
        }
}

/* The --config option, found before anything else is parsed: the files are read first, so that
 * options on the command line override them. */
static const char *config_path_from_argv(int argc, char *argv[]) {
        const char *path = CONFIG_FILE_DEFAULT;

        for (int i = 1; i < argc; i++) {
                if (streq(argv[i], "--"))
                        break;
                if (streq(argv[i], "--config") && i + 1 < argc)
                        path = argv[++i];
                else if (strncmp(argv[i], "--config=", 9) == 0)
                        path = argv[i] + 9;
        }
        return path;
}

static int parse_argv(int argc, char *argv[], Config *c) {
        enum {
                ARG_VERSION = 0x100,
                ARG_CONFIG,
                ARG_SETTING, /* + the index in config_settings[]; + config_n_settings more: its old option */
        };
        _cleanup_free_ struct option *options = NULL;
        size_t n = 0;
        int opt, idx = -1, r;

        options = calloc(2 * config_n_settings + 5, sizeof(struct option));
        if (!options)
                return log_error_errno(-ENOMEM, "Out of memory.");
        options[n++] = (struct option){ "help", no_argument, NULL, 'h' };
        options[n++] = (struct option){ "version", no_argument, NULL, ARG_VERSION };
        options[n++] = (struct option){ "config", required_argument, NULL, ARG_CONFIG };
        options[n++] = (struct option){ "verbose", no_argument, NULL, 'v' };
        for (size_t i = 0; i < config_n_settings; i++) {
                if (config_settings[i].option)
                        options[n++] = (struct option){ config_settings[i].option, required_argument, NULL,
                                                        ARG_SETTING + (int) i };
                if (config_settings[i].old_option)
                        options[n++] = (struct option){ config_settings[i].old_option, required_argument,
                                                        NULL, ARG_SETTING + (int) (config_n_settings + i) };
        }

        while ((opt = getopt_long(argc, argv, "hv", options, &idx)) >= 0) {
                const Setting *s;
                const char *name;

                switch (opt) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("tpd %s\n", TPD_VERSION);
                        return 0;
                case ARG_CONFIG:
                        /* Read before the other options, in run(). */
                        break;
                case 'v':
                        log_set_max_level(LOG_DEBUG);
                        break;
                default:
                        if (opt < ARG_SETTING || (size_t) (opt - ARG_SETTING) >= 2 * config_n_settings)
                                return -EINVAL;
                        s = &config_settings[(size_t) (opt - ARG_SETTING) % config_n_settings];
                        /* The option as it was given: an old name is still the one to name. */
                        name = (size_t) (opt - ARG_SETTING) >= config_n_settings ? s->old_option : s->option;
                        if (name != s->option)
                                log_notice("--%s= is deprecated, use --%s=", s->old_option, s->option);
                        r = config_setting_set(s, c, optarg);
                        if (r == -ENOMEM)
                                return log_error_errno(r, "Out of memory.");
                        if (r < 0) {
                                log_error("Invalid value '%s' for --%s: expected %s.", optarg, name,
                                          s->expected);
                                return r;
                        }
                }
        }
        if (optind < argc) {
                log_error("Unexpected argument '%s'; see 'tpd --help'.", argv[optind]);
                return -EINVAL;
        }
        return 1;
}

/* The socket systemd passed, named "varlink" in tpd.socket; -1 when not socket-activated. */
static int listen_fd_from_systemd(void) {
        char **names = NULL;
        int n, fd = -1;

        n = sd_listen_fds_with_names(true, &names);
        if (n < 0)
                return log_error_errno(n, "Failed to get the sockets passed by systemd: %m");
        for (int i = 0; i < n; i++) {
                if (fd < 0 && (!names || streq(names[i], "varlink") || n == 1))
                        fd = SD_LISTEN_FDS_START + i;
                else
                        safe_close(SD_LISTEN_FDS_START + i);
        }
        strv_free(names);
        return fd;
}

static int run(int argc, char *argv[]) {
        _cleanup_(config_done) Config config = {};
        _cleanup_(manager_freep) Manager *m = NULL;
        int r, fd;

        r = config_init(&config);
        if (r < 0)
                return log_error_errno(r, "Out of memory.");
        r = config_load(config_path_from_argv(argc, argv), &config);
        if (r < 0)
                return r;
        r = parse_argv(argc, argv, &config);
        if (r <= 0)
                return r;
        /* systemd's StateDirectory= says where; an empty --state-dir= says: do not save. */
        if (!config.state_dir && config_setting_set(config_setting_by_name("state_dir"), &config,
                                                    getenv("STATE_DIRECTORY") ?: "/var/lib/tpd") < 0)
                return log_error_errno(-ENOMEM, "Out of memory.");
        if (!*config.state_dir)
                config.state_dir = mfree(config.state_dir);

        tracing_setup_logging();

        /* Four fds per possible CPU (its trace_pipe_raw, a pipe, its stats) and two per peer: the
         * usual soft limit of 1024 would run out near 250 CPUs. tpd uses no select(), so it takes
         * the hard limit, as systemd advises such programs to. */
        struct rlimit nofile;
        if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
                nofile.rlim_cur = nofile.rlim_max;
                (void) setrlimit(RLIMIT_NOFILE, &nofile);
        }

        /* sd-event takes signals through a signalfd, which needs them blocked. */
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return log_error_errno(negative_errno(), "Failed to block signals: %m");
        /* A peer that goes away mid-write must cost an EPIPE, not the daemon. */
        signal(SIGPIPE, SIG_IGN);

        fd = listen_fd_from_systemd();
        if (fd < -1)
                return fd;

        r = manager_new(&config, &m);
        if (r < 0)
                return log_error_errno(r, "Failed to allocate the manager: %m");

        r = manager_start(m, fd, api_dispatch);
        if (r < 0)
                return r;

        return manager_run(m);
}

int main(int argc, char *argv[]) {
        int r;

        /* Decode workers fill batches in their own malloc arenas, and paused streams keep some of
         * them for long. With glibc's sliding mmap threshold, a batch freed once raises it, later
         * batches land on the arenas' heaps, and the holes that those kept pin stay resident: 40 to
         * 83 MiB where the memory bound (docs/design.md §5) says 76 at most. Above a fixed threshold
         * every large buffer has pages of its own, given back when it is freed (33.5 MiB in the
         * same run; tests/integration/test-memory.py). */
        if (mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 0)
                log_debug("Failed to fix the mmap threshold.");
        r = run(argc, argv);
        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
