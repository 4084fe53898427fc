/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target: one input is the byte stream a client sends. It is framed by VarlinkBuffer in
 * chunks of varying size (as reads would split it), with a 1 KiB message limit; each message is
 * parsed as a call, and a call that parses has its parameters read with every getter the API uses
 * and serialised back as a reply and as an error. Serialised messages must be NUL-terminated and
 * parse again; anything else aborts. As the daemon does, framing stops at the first message that
 * is too long or does not parse.
 */

#include <string.h>

#include <json-c/json.h>

#include "fuzz.h"
#include "varlink.h"

#define FUZZ_MESSAGE_MAX 1024

static void check_serialised(const char *text, size_t len) {
        json_object *o;

        if (len == 0 || text[len - 1] != 0 || strlen(text) != len - 1)
                abort();
        o = json_tokener_parse(text);
        if (!o || !json_object_is_type(o, json_type_object))
                abort();
        json_object_put(o);
}

static void use_call(const VarlinkCall *call) {
        static const char *const keys[] = {
                "events", "pids", "cpus", "filter", "pattern", "event", "print", NULL,
        };
        const char *s, *bad;
        int64_t *iv;
        char **sv, *text;
        size_t n, len;
        bool b;

        if (!call->method || strlen(call->method) > FUZZ_MESSAGE_MAX)
                abort();
        (void) varlink_param_string(call->parameters, "filter", true, &s);
        (void) varlink_param_string(call->parameters, "event", false, &s);
        (void) varlink_param_bool(call->parameters, "print", &b);
        if (varlink_param_strv(call->parameters, "events", 64, &sv, &n) == 0) {
                for (size_t k = 0; k < n; k++)
                        if (!sv[k])
                                abort();
                if (sv && sv[n])
                        abort();
                free(sv);
        }
        if (varlink_param_intv(call->parameters, "pids", 64, &iv, &n) == 0)
                free(iv);
        (void) varlink_params_check_keys(call->parameters, keys, &bad);

        if (varlink_reply(json_object_get(call->parameters), call->more, &text, &len) == 0) {
                check_serialised(text, len);
                free(text);
        }
        if (varlink_error("org.varlink.service.InvalidParameter", json_object_get(call->parameters), &text,
                          &len) == 0) {
                check_serialised(text, len);
                free(text);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        VarlinkBuffer b;
        size_t pos = 0;

        varlink_buffer_init(&b, FUZZ_MESSAGE_MAX);
        while (pos < size) {
                /* Chunk sizes that vary with the position, like reads of a socket would. */
                size_t chunk = 1 + (pos * 7 + size) % 97;
                const char *msg;
                size_t len;
                char *p;
                int r;

                if (chunk > size - pos)
                        chunk = size - pos;
                if (varlink_buffer_space(&b, chunk, &p) < 0)
                        abort();
                memcpy(p, data + pos, chunk);
                varlink_buffer_advance(&b, chunk);
                pos += chunk;

                while ((r = varlink_buffer_next(&b, &msg, &len)) == 1) {
                        VarlinkCall call;

                        if (len > FUZZ_MESSAGE_MAX || msg[len] != 0)
                                abort();
                        if (varlink_call_parse(msg, len, &call) < 0)
                                goto done;
                        use_call(&call);
                        varlink_call_done(&call);
                }
                if (r == -EMSGSIZE)
                        goto done;
                if (r != 0)
                        abort();
        }
done:
        varlink_buffer_done(&b);
        return 0;
}
