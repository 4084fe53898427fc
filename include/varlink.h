/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

/*
 * Varlink framing and messages (https://varlink.org): each message is a JSON object followed by
 * one NUL byte. Pure code: the caller moves the bytes; this module splits, checks and builds.
 */

typedef struct VarlinkBuffer {
        char *data;
        size_t len;      /* bytes held */
        size_t consumed; /* bytes of messages already handed out */
        size_t cap;
        size_t max; /* a message longer than this is an error */
} VarlinkBuffer;

void varlink_buffer_init(VarlinkBuffer *b, size_t max);
void varlink_buffer_done(VarlinkBuffer *b);
/* Room for at least n more bytes at *ret; the caller fills some and calls varlink_buffer_advance. */
int varlink_buffer_space(VarlinkBuffer *b, size_t n, char **ret);
void varlink_buffer_advance(VarlinkBuffer *b, size_t n);
/* Hands out the next complete message (NUL-terminated, in place, valid until the next call that
 * changes the buffer). Returns 1 with a message, 0 when more bytes are needed, -EMSGSIZE when the
 * pending message exceeds the limit. */
int varlink_buffer_next(VarlinkBuffer *b, const char **ret, size_t *ret_len);
/* Bytes received after the last message handed out (e.g. before an upgrade). */
size_t varlink_buffer_pending(const VarlinkBuffer *b);

typedef struct VarlinkCall {
        const char *method;      /* points into parameters' owner, valid while the call is */
        json_object *object;     /* the whole message */
        json_object *parameters; /* never NULL: an empty object when absent */
        bool more;
        bool oneway;
        bool upgrade;
} VarlinkCall;

/* Strict JSON (no trailing commas, single quotes, NaN, or trailing bytes) of exactly len bytes;
 * -EBADMSG otherwise. The one place json-c's parser is called. */
int varlink_json_parse(const char *text, size_t len, json_object **ret);

/* Adds v under key, taking v over; a NULL v is json-c's out-of-memory, so is a failed add. */
int json_add(json_object *o, const char *key, json_object *v);

/* Parses and checks a call: an object with a string "method", an optional object "parameters"
 * and optional booleans more/oneway/upgrade, nothing else of the wrong type. -EBADMSG otherwise. */
int varlink_call_parse(const char *msg, size_t len, VarlinkCall *ret);
void varlink_call_done(VarlinkCall *call);

typedef struct VarlinkReply {
        const char *error;       /* the error id, NULL for a reply */
        json_object *object;     /* the whole message */
        json_object *parameters; /* never NULL: an empty object when absent */
        bool continues;
} VarlinkReply;

/* Parses and checks a reply: an object with optional string "error", object "parameters" and
 * boolean "continues". -EBADMSG otherwise. */
int varlink_reply_parse(const char *msg, size_t len, VarlinkReply *ret);
void varlink_reply_done(VarlinkReply *reply);

/* Serialises a call (NUL included in *ret_len). Takes ownership of parameters (NULL: none). */
int varlink_call_format(const char *method, json_object *parameters, bool upgrade, bool more, char **ret,
                        size_t *ret_len);

/* Serialises a reply or an error (NUL included in *ret_len). Takes ownership of parameters, which
 * may be NULL. */
int varlink_reply(json_object *parameters, bool continues, char **ret, size_t *ret_len);
int varlink_error(const char *error, json_object *parameters, char **ret, size_t *ret_len);

/* Typed access to call parameters with strict checks; -EINVAL names the offending key in *ret_bad. */
int varlink_param_string(json_object *params, const char *key, bool optional, const char **ret);
int varlink_param_bool(json_object *params, const char *key, bool *ret);
/* A string array; NULL (and 0) when absent. The strings belong to params. */
int varlink_param_strv(json_object *params, const char *key, size_t max, char ***ret, size_t *ret_n);
int varlink_param_intv(json_object *params, const char *key, size_t max, int64_t **ret, size_t *ret_n);
/* Fails with -E2BIG naming the first key of params not in the NULL-terminated list. */
int varlink_params_check_keys(json_object *params, const char *const *allowed, const char **ret_bad);
