/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-bus.h>

#include "core/cgroup.h"
#include "message.h"
#include "output.h"
#include "units.h"
#include "util.h"

/* The units that have a cgroup, by the suffix of their name, and the D-Bus interface that holds
 * its ControlGroup property. */
static const struct {
        const char *suffix, *interface;
} unit_types[] = {
        { ".service", "org.freedesktop.systemd1.Service" }, { ".scope", "org.freedesktop.systemd1.Scope" },
        { ".slice", "org.freedesktop.systemd1.Slice" },     { ".socket", "org.freedesktop.systemd1.Socket" },
        { ".mount", "org.freedesktop.systemd1.Mount" },     { ".swap", "org.freedesktop.systemd1.Swap" },
};

static const char *unit_interface(const char *unit) {
        size_t n = strlen(unit);

        for (size_t i = 0; i < ELEMENTSOF(unit_types); i++) {
                size_t k = strlen(unit_types[i].suffix);

                if (n > k && streq(unit + n - k, unit_types[i].suffix))
                        return unit_types[i].interface;
        }
        return NULL;
}

int unit_cgroup(const char *name, char **ret) {
        _cleanup_free_ char *unit = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        sd_bus *bus = NULL;
        const char *interface, *path;
        char *cgroup = NULL;
        int r;

        /* As systemctl takes it: a name without a type is a service. */
        if (asprintf(&unit, strchr(name, '.') ? "%s" : "%s.service", name) < 0)
                return log_oom();
        interface = unit_interface(unit);
        if (!interface)
                return log_error_errno(-EINVAL,
                                       "unit %s: only services, scopes, slices, sockets, mounts and swaps "
                                       "have a cgroup",
                                       output_escape(unit));
        r = sd_bus_open_system(&bus);
        if (r < 0)
                return log_error_errno(r, "cannot ask systemd for unit %s (no system bus: %m)",
                                       output_escape(unit));
        r = sd_bus_call_method(bus, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                               "org.freedesktop.systemd1.Manager", "GetUnit", &error, &reply, "s", unit);
        if (r >= 0)
                r = sd_bus_message_read(reply, "o", &path);
        if (r >= 0)
                r = sd_bus_get_property_string(bus, "org.freedesktop.systemd1", path, interface,
                                               "ControlGroup", &error, &cgroup);
        if (r < 0) {
                if (sd_bus_error_has_name(&error, "org.freedesktop.systemd1.NoSuchUnit"))
                        log_error("unit %s is not loaded", output_escape(unit));
                else
                        log_error("cannot ask systemd for the cgroup of unit %s: %s", output_escape(unit),
                                  error.message ? output_escape(error.message) : strerror(-r));
        } else if (!cgroup || !cgroup[0]) {
                log_error("unit %s has no cgroup now (it is not running)", output_escape(unit));
                r = -ENOENT;
        }
        sd_bus_error_free(&error);
        sd_bus_message_unref(reply);
        sd_bus_flush_close_unref(bus);
        if (r < 0) {
                free(cgroup);
                return r;
        }
        *ret = cgroup;
        return 0;
}

ssize_t unit_cgroup_of_pid(pid_t pid, char *buf, size_t size) {
        char path[64], text[8192];
        const char *line;
        size_t n, len;
        FILE *f;

        (void) snprintf(path, sizeof(path), "/proc/%d/cgroup", (int) pid);
        f = fopen(path, "re");
        if (!f)
                return errno == ENOENT ? -ESRCH : -errno;
        n = fread(text, 1, sizeof(text), f);
        fclose(f);
        if (!cgroup_v2_line(text, n, &line, &len))
                return -ENOENT;
        if (len >= size)
                return -ENAMETOOLONG;
        memcpy(buf, line, len);
        buf[len] = '\0';
        return (ssize_t) len;
}
