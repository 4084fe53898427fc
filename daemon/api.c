/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <traceevent/event-parse.h>

#include "access.h"
#include "api.h"
#include "build-config.h"
#include "calls.h"
#include "core/names.h"
#include "log.h"
#include "manager.h"
#include "peer.h"
#include "pins.h"
#include "status.h"
#include "streams.h"
#include "tpd-protocol.h"

/* A call that keeps the loop longer than this is logged at debug level. */
#define API_SLOW_CALL_USEC 10000LL

typedef int (*ApiMethod)(Manager *m, Peer *p, const VarlinkCall *call);

static int method_get_info(Manager *m, Peer *peer, const VarlinkCall *call) {
        static const char *const keys[] = { NULL };
        json_object *p, *ifaces;
        int r = 0;

        if (check_keys(peer, call, keys) < 0)
                return 0;
        p = json_object_new_object();
        ifaces = json_object_new_array();
        json_push(&r, ifaces, json_object_new_string(VARLINK_SERVICE));
        json_push(&r, ifaces, json_object_new_string(TPD_INTERFACE));
        json_set(&r, p, "vendor", json_object_new_string("tpd"));
        json_set(&r, p, "product", json_object_new_string("tpd"));
        json_set(&r, p, "version", json_object_new_string(TPD_VERSION));
        json_set(&r, p, "url", json_object_new_string("https://github.com/tpd-project/tpd"));
        json_set(&r, p, "interfaces", ifaces);
        return call_reply(peer, p, r);
}

static int method_get_interface_description(Manager *m, Peer *peer, const VarlinkCall *call) {
        static const char *const keys[] = { "interface", NULL };
        const char *iface = NULL;
        json_object *p;
        int r = 0;

        if (check_keys(peer, call, keys) < 0)
                return 0;
        if (varlink_param_string(call->parameters, "interface", false, &iface) < 0)
                return invalid_parameter(peer, "interface");
        if (!streq(iface, TPD_INTERFACE))
                return peer_errorf(peer, VARLINK_SERVICE ".InterfaceNotFound", "interface", iface,
                                   "No interface '%s' here.", iface);
        p = json_object_new_object();
        json_set(&r, p, "description", json_object_new_string(api_interface_description));
        return call_reply(peer, p, r);
}

static bool event_enabled(Manager *m, const char *name) {
        TracingEvent *e = tracing_event_find(m->tracing, name);
        return e && e->enabled;
}

static int list_text(Manager *m, char *const *names, char **ret) {
        size_t len = 2, n = 0;
        char *text, *p;

        for (char *const *k = names; *k; k++, n++)
                len += strlen(*k) + sizeof("{\"name\":\"\",\"enabled\":false},");
        text = p = malloc(len + 1);
        if (!text)
                return -ENOMEM;
        *p++ = '[';
        for (char *const *k = names; *k; k++)
                p += sprintf(p, "%s{\"name\":\"%s\",\"enabled\":%s}", k == names ? "" : ",", *k,
                             event_enabled(m, *k) ? "true" : "false");
        *p++ = ']';
        *p = 0;
        *ret = text;
        return 0;
}

static int list_serialize(json_object *o, struct printbuf *pb, int level, int flags) {
        const char *text = json_object_get_userdata(o);
        return printbuf_memappend(pb, text, (int) strlen(text));
}

static void list_text_free(json_object *o, void *userdata) {
        free(userdata);
}

static int method_list_events(Manager *m, Peer *peer, const VarlinkCall *call) {
        static const char *const keys[] = { "pattern", NULL };
        _cleanup_strv_free_ char **names = NULL;
        _cleanup_free_ char *text = NULL;
        const char *pattern = NULL;
        json_object *p, *list;
        int r;

        if (check_keys(peer, call, keys) < 0)
                return 0;
        if (varlink_param_string(call->parameters, "pattern", true, &pattern) < 0)
                return invalid_parameter(peer, "pattern");

        r = tracing_list_events(m->tracing, pattern, &names);
        if (r == -EINVAL)
                return peer_errorf(peer, VARLINK_ERROR_INVALID_PARAMETER, "parameter", "pattern",
                                   "'%s' is not a valid pattern: use system:event with * and ? globs.",
                                   pattern);
        if (r < 0)
                return r;

        /* The list is written as text: a json-c object per event made the whole list cost
         * ≈ 10 ms of the loop (100 ms under ASan). Event names are [A-Za-z0-9_:], nothing to
         * escape. */
        r = list_text(m, names, &text);
        if (r < 0)
                return r;
        list = json_object_new_array();
        if (!list)
                return -ENOMEM;
        json_object_set_serializer(list, list_serialize, TAKE_PTR(text), list_text_free);
        p = json_object_new_object();
        json_set(&r, p, "events", list);
        return call_reply(peer, p, r);
}

static int method_describe_event(Manager *m, Peer *peer, const VarlinkCall *call) {
        static const char *const keys[] = { "event", NULL };
        _cleanup_free_ char *print_fmt = NULL;
        const char *name = NULL;
        TracingEvent *e;
        json_object *p, *fields;
        int r;

        if (check_keys(peer, call, keys) < 0)
                return 0;
        if (varlink_param_string(call->parameters, "event", false, &name) < 0)
                return invalid_parameter(peer, "event");
        if (names_is_glob(name))
                return resolve_error(peer, -EINVAL, name);

        r = tracing_event_get(m->tracing, name, &e);
        if (r == -ENOENT || r == -EINVAL)
                return resolve_error(peer, r, name);
        if (r < 0)
                return tracefs_error(peer, r, "load the event format");
        (void) tracing_event_print_fmt(m->tracing, e, &print_fmt);

        fields = json_object_new_array();
        for (struct tep_format_field *f = e->format->format.fields; f; f = f->next) {
                json_object *o = json_object_new_object();
                json_set(&r, o, "name", json_object_new_string(f->name));
                json_set(&r, o, "type", json_object_new_string(f->type));
                json_set(&r, o, "size", json_object_new_int(f->size));
                json_set(&r, o, "signed", json_object_new_boolean(f->flags & TEP_FIELD_IS_SIGNED));
                json_push(&r, fields, o);
        }
        p = json_object_new_object();
        json_set(&r, p, "name", json_object_new_string(e->name));
        json_set(&r, p, "id", json_object_new_int(e->format->id));
        json_set(&r, p, "fields", fields);
        json_set(&r, p, "print_fmt", json_object_new_string(strempty(print_fmt)));
        return call_reply(peer, p, r);
}

/* Puts a checked value of a runtime setting into effect. */
static int configure_apply(Manager *m, Peer *p, const Setting *s, const Config *v) {
        int r;

        if (streq(s->name, "clock")) {
                r = tracing_set_clock(m->tracing, v->clock);
                if (r == -EINVAL)
                        return peer_errorf(p, VARLINK_ERROR_INVALID_PARAMETER, "parameter", s->name,
                                           "The kernel has no trace clock '%s'.", v->clock);
                if (r < 0)
                        return tracefs_error(p, r, "set the trace clock");
                comm_cache_set_clock(m->comm, v->clock);
                if (m->workers)
                        (void) workers_set_clock(m->workers, v->clock);
        } else if (streq(s->name, "buffer_size_kb")) {
                /* The kernel's default size is only known before the first change. */
                if (v->buffer_size_kb == 0)
                        return peer_errorf(p, VARLINK_ERROR_INVALID_PARAMETER, "parameter", s->name,
                                           "buffer_size_kb 0 (the kernel's default) applies at start only.");
                r = tracing_set_buffer_size_kb(m->tracing, v->buffer_size_kb);
                if (r < 0)
                        return tracefs_error(p, r, "set the buffer size");
        } else if (streq(s->name, "flush_interval_ms"))
                (void) sd_event_source_set_time_relative(m->flush_timer,
                                                         (uint64_t) v->flush_interval_ms * 1000);
        else if (streq(s->name, "decode_workers")) {
                r = manager_set_decode_workers(m, v->decode_workers);
                if (r == -ERANGE)
                        return peer_errorf(
                                p, VARLINK_ERROR_INVALID_PARAMETER, "parameter", s->name,
                                "tpd started %u decode threads (DecodeWorkers=): more need a restart.",
                                workers_count(m->workers));
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Configure takes the settings config_settings[] marks "runtime", by their names, checked as the
 * configuration files check them. */
static int method_configure(Manager *m, Peer *p, const VarlinkCall *call) {
        int r;

        json_object_object_foreach(call->parameters, key, val) {
                const Setting *s = config_setting_by_name(key);
                (void) val;
                if (!s || !s->runtime)
                        return invalid_parameter(p, key);
        }
        if (!access_peer_is_root(p))
                return peer_errorf(p, VARLINK_ERROR_PERMISSION_DENIED, NULL, NULL,
                                   "Only root may change tpd's settings.");

        json_object_object_foreach(call->parameters, name, value) {
                const Setting *s = config_setting_by_name(name);
                _cleanup_(config_done) Config scratch = {};
                char number[32];
                const char *text;

                if (json_object_is_type(value, json_type_null))
                        continue;
                /* Numbers also for a string setting that takes them (decode_workers: "auto" or N). */
                if (s->type != SETTING_BOOL && s->type != SETTING_EVENTS &&
                    json_object_is_type(value, json_type_int)) {
                        snprintf(number, sizeof(number), "%" PRId64, json_object_get_int64(value));
                        text = number;
                } else if (s->type == SETTING_STRING && json_object_is_type(value, json_type_string) &&
                           strlen(json_object_get_string(value)) ==
                                   (size_t) json_object_get_string_len(value))
                        text = json_object_get_string(value);
                else
                        return invalid_parameter(p, name);

                r = config_setting_set(s, &scratch, text);
                if (r == -EINVAL)
                        return peer_errorf(p, VARLINK_ERROR_INVALID_PARAMETER, "parameter", name,
                                           "Invalid value for '%s': expected %s.", name, s->expected);
                if (r < 0)
                        return r;
                r = configure_apply(m, p, s, &scratch);
                if (r != 0)
                        return r;
                r = config_setting_set(s, &m->config, text);
                if (r < 0)
                        return r;
                log_info("Setting %s changed to %s by uid %u.", name, text, (unsigned) p->uid);
        }
        return peer_reply(p, NULL);
}

static const struct {
        const char *name;
        ApiMethod method;
} methods[] = {
        { TPD_METHOD("Configure"), method_configure },
        { VARLINK_METHOD_GET_INFO, method_get_info },
        { VARLINK_METHOD_GET_INTERFACE_DESCRIPTION, method_get_interface_description },
        { TPD_METHOD("ListEvents"), method_list_events },
        { TPD_METHOD("DescribeEvent"), method_describe_event },
        { TPD_METHOD("Enable"), pins_method_enable },
        { TPD_METHOD("Disable"), pins_method_disable },
        { TPD_METHOD("GetStatus"), status_method_get_status },
        { TPD_METHOD("GetCounters"), status_method_get_counters },
        { TPD_METHOD("Stream"), streams_method_stream },
        { TPD_METHOD("Record"), streams_method_record },
        { TPD_METHOD("Aggregate"), streams_method_aggregate },
};

int api_dispatch(Manager *m, Peer *p, const VarlinkCall *call) {
        int r;

        for (size_t i = 0; i < ELEMENTSOF(methods); i++)
                if (streq(call->method, methods[i].name)) {
                        uint64_t t0 = now_usec(CLOCK_MONOTONIC), usec;

                        r = methods[i].method(m, p, call);
                        /* Every call runs on the loop: say which ones hold it up (tpd -v). */
                        usec = now_usec(CLOCK_MONOTONIC) - t0;
                        if (usec > API_SLOW_CALL_USEC)
                                log_debug("Peer %d: %s took %" PRIu64 " ms.", (int) p->pid, methods[i].name,
                                          usec / 1000);
                        if (r < 0)
                                log_debug_errno(r, "Peer %d: %s failed: %m", (int) p->pid,
                                                escape_text(call->method, (char[256]){}, 256));
                        return r;
                }

        return peer_errorf(p, VARLINK_ERROR_METHOD_NOT_FOUND, "method", call->method, "No method '%s'.",
                           call->method);
}
