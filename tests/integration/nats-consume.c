/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The test consumer of `tpctl export`: reads a JetStream stream with libnats.
 *
 *   nats-consume URLS STREAM dump     every message now in the stream, from the first, one line
 *                                     per record: SUBJECT TAB MSG-ID TAB RECORD
 *   nats-consume URLS STREAM leader   the name of the server that leads the stream
 *   nats-consume URLS STREAM count    the number of messages in the stream
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nats/nats.h>

static int fail(const char *what, natsStatus s) {
        fprintf(stderr, "nats-consume: %s: %s (%s)\n", what, natsStatus_GetText(s), nats_GetLastError(NULL));
        return 1;
}

/* Message by message with js_GetMsg: no consumer state that a leader change could disturb. */
static int dump(jsCtx *js, const char *stream, uint64_t first, uint64_t last) {
        for (uint64_t seq = first; seq > 0 && seq <= last; seq++) {
                natsMsg *msg = NULL;
                jsErrCode jerr = 0;
                const char *id = "", *p, *end;
                natsStatus s;

                s = js_GetMsg(&msg, js, stream, seq, NULL, &jerr);
                if (s == NATS_NOT_FOUND || jerr == JSNoMessageFoundErr)
                        continue; /* deleted */
                if (s != NATS_OK)
                        return fail("cannot get a message", s);
                (void) natsMsgHeader_Get(msg, "Nats-Msg-Id", &id);
                p = natsMsg_GetData(msg);
                end = p + natsMsg_GetDataLength(msg);
                while (p < end) {
                        const char *nl = memchr(p, '\n', (size_t) (end - p));
                        size_t n = nl ? (size_t) (nl - p) : (size_t) (end - p);

                        printf("%s\t%s\t%.*s\n", natsMsg_GetSubject(msg), id ? id : "", (int) n, p);
                        p += n + 1;
                }
                natsMsg_Destroy(msg);
        }
        return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char *argv[]) {
        natsConnection *nc = NULL;
        natsOptions *opts = NULL;
        jsStreamInfo *si = NULL;
        jsCtx *js = NULL;
        jsErrCode jerr = 0;
        const char *urls[16];
        int n_urls = 0;
        natsStatus s;
        int r = 1;

        if (argc != 4) {
                fprintf(stderr, "usage: nats-consume URLS STREAM dump|leader|count\n");
                return 2;
        }
        for (char *save = NULL, *u = strtok_r(argv[1], ",", &save); u && n_urls < 16;
             u = strtok_r(NULL, ",", &save))
                urls[n_urls++] = u;
        s = natsOptions_Create(&opts);
        if (s == NATS_OK)
                s = natsOptions_SetServers(opts, urls, n_urls);
        if (s == NATS_OK)
                s = natsConnection_Connect(&nc, opts);
        if (s == NATS_OK)
                s = natsConnection_JetStream(&js, nc, NULL);
        if (s != NATS_OK)
                return fail("cannot connect", s);
        s = js_GetStreamInfo(&si, js, argv[2], NULL, &jerr);
        if (s != NATS_OK)
                return fail("no stream info", s);

        if (strcmp(argv[3], "leader") == 0) {
                printf("%s\n", si->Cluster && si->Cluster->Leader ? si->Cluster->Leader : "");
                r = 0;
        } else if (strcmp(argv[3], "count") == 0) {
                printf("%" PRIu64 "\n", si->State.Msgs);
                r = 0;
        } else if (strcmp(argv[3], "dump") == 0)
                r = dump(js, argv[2], si->State.FirstSeq, si->State.LastSeq);
        jsStreamInfo_Destroy(si);
        jsCtx_Destroy(js);
        natsConnection_Destroy(nc);
        natsOptions_Destroy(opts);
        nats_Close();
        return r;
}
