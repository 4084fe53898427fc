/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "build-config.h"
#include "config.h"
#include "log.h"
#include "manager.h"
#include "tpd-protocol.h"

static void help(void) {
        printf("Usage: tpd [OPTIONS]\n\n"
               "Serve Linux kernel tracepoints as JSON over Varlink.\n\n"
               "  -h --help                  Show this help\n"
               "     --version               Show the version\n"
               "     --socket=PATH           Listen on PATH (default: %s), unless systemd\n"
               "                             passes a socket\n"
               "     --instance=NAME         Tracefs instance to create (default: tpd)\n"
               "     --clock=CLOCK           Trace clock (default: boot)\n"
               "     --buffer-size-kb=KB     Ring buffer size per CPU (default: the kernel's)\n"
               "     --flush-interval-ms=MS  Deliver partially filled pages after MS (default: 100)\n"
               "     --buffer-percent=N      Wake the readers when N %% of the buffer is full\n"
               "                             (default: %u)\n"
               "     --max-clients=N         Streams served at once (default: 64)\n"
               "     --client-queue-kb=KB    Records queued per stream before it loses some\n"
               "                             (default: 8192)\n"
               "     --access-group=GROUP    Group allowed besides root (default: tracing)\n"
               "     --config=PATH           Configuration file, and drop-ins in PATH.d/\n"
               "                             (default: %s)\n"
               "     --state-dir=DIR         Save pinned events here (default: $STATE_DIRECTORY,\n"
               "                             else /var/lib/tpd); empty: do not save\n"
               "  -v --verbose               Log debug messages\n",
               TPD_SOCKET_DEFAULT, MANAGER_BUFFER_PERCENT_DEFAULT, CONFIG_FILE_DEFAULT);
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

static int parse_argv(int argc, char *argv[], ManagerConfig *c) {
        enum {
                ARG_VERSION = 0x100,
                ARG_SOCKET,
                ARG_INSTANCE,
                ARG_CLOCK,
                ARG_BUFFER_SIZE_KB,
                ARG_FLUSH_INTERVAL_MS,
                ARG_MAX_CLIENTS,
                ARG_CLIENT_QUEUE_KB,
                ARG_ACCESS_GROUP,
                ARG_STATE_DIR,
                ARG_CONFIG,
                ARG_BUFFER_PERCENT,
        };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                { "socket", required_argument, NULL, ARG_SOCKET },
                { "instance", required_argument, NULL, ARG_INSTANCE },
                { "clock", required_argument, NULL, ARG_CLOCK },
                { "buffer-size-kb", required_argument, NULL, ARG_BUFFER_SIZE_KB },
                { "flush-interval-ms", required_argument, NULL, ARG_FLUSH_INTERVAL_MS },
                { "max-clients", required_argument, NULL, ARG_MAX_CLIENTS },
                { "client-queue-kb", required_argument, NULL, ARG_CLIENT_QUEUE_KB },
                { "access-group", required_argument, NULL, ARG_ACCESS_GROUP },
                { "state-dir", required_argument, NULL, ARG_STATE_DIR },
                { "config", required_argument, NULL, ARG_CONFIG },
                { "buffer-percent", required_argument, NULL, ARG_BUFFER_PERCENT },
                { "verbose", no_argument, NULL, 'v' },
                {}
        };
        int opt, idx = -1, r = 0;

        while ((opt = getopt_long(argc, argv, "hv", options, &idx)) >= 0) {
                switch (opt) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("tpd %s\n", TPD_VERSION);
                        return 0;
                case ARG_SOCKET:
                        r = config_set_string(&c->socket_path, optarg);
                        break;
                case ARG_INSTANCE:
                        if (!config_instance_name_is_valid(optarg)) {
                                log_error("Invalid instance name '%s': use letters, digits, '_', '-' and '.'.",
                                          optarg);
                                return -EINVAL;
                        }
                        r = config_set_string(&c->instance, optarg);
                        break;
                case ARG_CLOCK:
                        /* An empty or odd name is refused here rather than by the kernel later. */
                        r = tracing_clock_name_is_valid(optarg) ? config_set_string(&c->clock, optarg) : -EINVAL;
                        break;
                case ARG_BUFFER_SIZE_KB:
                        r = config_parse_unsigned(optarg, 4, 4U * 1024 * 1024, &c->buffer_size_kb);
                        break;
                case ARG_FLUSH_INTERVAL_MS:
                        r = config_parse_unsigned(optarg, 1, 60 * 1000, &c->flush_interval_ms);
                        break;
                case ARG_MAX_CLIENTS:
                        r = config_parse_unsigned(optarg, 1, 65536, &c->max_clients);
                        break;
                case ARG_CLIENT_QUEUE_KB:
                        r = config_parse_unsigned(optarg, 64, 1024 * 1024, &c->client_queue_kb);
                        break;
                case ARG_ACCESS_GROUP:
                        r = config_set_string(&c->access_group, optarg);
                        break;
                case ARG_STATE_DIR:
                        r = config_set_string(&c->state_dir, optarg);
                        break;
                case ARG_BUFFER_PERCENT:
                        r = config_parse_unsigned(optarg, 1, 100, &c->buffer_percent);
                        break;
                case ARG_CONFIG:
                        /* Read before the other options, in run(). */
                        break;
                case 'v':
                        log_set_max_level(LOG_DEBUG);
                        break;
                default:
                        return -EINVAL;
                }
                if (r < 0) {
                        log_error("Invalid value '%s' for --%s.", optarg, idx >= 0 ? options[idx].name : "?");
                        return r;
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
        _cleanup_(manager_config_done) ManagerConfig config = {
                .buffer_percent = MANAGER_BUFFER_PERCENT_DEFAULT,
                .flush_interval_ms = 100,
                .max_clients = 64,
                .client_queue_kb = 8192,
                .max_glob_events = 64,
                .max_call_events = 32,
                .max_enabled_events = 1024,
        };
        _cleanup_(manager_freep) Manager *m = NULL;
        int r, fd;

        r = config_load(config_path_from_argv(argc, argv), &config);
        if (r < 0)
                return r;
        r = parse_argv(argc, argv, &config);
        if (r <= 0)
                return r;
        if ((!config.socket_path && config_set_string(&config.socket_path, TPD_SOCKET_DEFAULT) < 0) ||
            (!config.instance && config_set_string(&config.instance, "tpd") < 0) ||
            (!config.clock && config_set_string(&config.clock, "boot") < 0) ||
            (!config.access_group && config_set_string(&config.access_group, "tracing") < 0) ||
            (!config.state_dir && config_set_string(&config.state_dir, getenv("STATE_DIRECTORY") ?: "/var/lib/tpd") < 0))
                return log_error_errno(-ENOMEM, "Out of memory.");
        if (config.state_dir && !*config.state_dir)
                config.state_dir = mfree(config.state_dir);

        log_setup_libraries();

        /* sd-event takes signals through a signalfd, which needs them blocked. */
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return log_error_errno(negative_errno(), "Failed to block signals: %m");
        /* A client that goes away mid-write must cost an EPIPE, not the daemon. */
        signal(SIGPIPE, SIG_IGN);

        fd = listen_fd_from_systemd();
        if (fd < -1)
                return fd;

        r = manager_new(&config, &m);
        if (r < 0)
                return log_error_errno(r, "Failed to allocate the manager: %m");

        r = manager_start(m, fd);
        if (r < 0)
                return r;

        return manager_run(m);
}

int main(int argc, char *argv[]) {
        int r = run(argc, argv);
        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
