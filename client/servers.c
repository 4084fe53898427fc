/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include "message.h"
#include "servers.h"

int servers_read_file(const char *path, char **ret) {
        _cleanup_free_ char *text = NULL, *list = NULL;
        _cleanup_close_ int fd = -1;
        struct stat st;
        size_t len = 0, n = 0;
        bool comment = false, line_start = true;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return log_error_errno(negative_errno(), "cannot open the servers file '%s': %m", path);
        if (fstat(fd, &st) < 0)
                return log_error_errno(negative_errno(), "cannot stat the servers file '%s': %m", path);
        if (!S_ISREG(st.st_mode))
                return log_error_errno(-EINVAL, "the servers file '%s' is not a regular file", path);
        if (st.st_mode & S_IROTH)
                log_error("warning: the servers file '%s' is readable by every user; passwords in it are "
                          "not secret",
                          path);
        text = malloc(SERVERS_FILE_MAX + 1);
        list = malloc(SERVERS_FILE_MAX + 1);
        if (!text || !list)
                return log_oom();
        for (;;) {
                ssize_t k = read(fd, text + len, SERVERS_FILE_MAX + 1 - len);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return log_error_errno(negative_errno(), "cannot read the servers file '%s': %m",
                                               path);
                if (k == 0)
                        break;
                len += (size_t) k;
                if (len > SERVERS_FILE_MAX)
                        return log_error_errno(-EFBIG, "the servers file '%s' is larger than %u bytes", path,
                                               SERVERS_FILE_MAX);
        }

        /* URLs joined by single commas; a comment runs to the end of its line. */
        for (size_t i = 0; i < len; i++) {
                char c = text[i];

                if (c == '\n') {
                        comment = false;
                        line_start = true;
                        c = ',';
                } else if (comment)
                        continue;
                else if (c == '#' && line_start) {
                        comment = true;
                        continue;
                } else if (c == ' ' || c == '\t' || c == '\r')
                        c = ',';
                else if ((unsigned char) c < 0x20 || c == 0x7f)
                        return log_error_errno(-EINVAL, "the servers file '%s' holds a control character",
                                               path);
                else
                        line_start = false;
                if (c == ',' && (n == 0 || list[n - 1] == ','))
                        continue;
                list[n++] = c;
        }
        if (n > 0 && list[n - 1] == ',')
                n--;
        list[n] = 0;
        if (n == 0)
                return log_error_errno(-EINVAL, "the servers file '%s' names no server", path);
        *ret = TAKE_PTR(list);
        return 0;
}

/* Appends n bytes of s to buf at *o, as far as they fit before the terminating NUL. */
static void append(char *buf, size_t size, size_t *o, const char *s, size_t n) {
        n = MIN(n, size - 1 - *o);
        memcpy(buf + *o, s, n);
        *o += n;
}

void servers_redact(const char *text, char *buf, size_t size) {
        const char *p = text;
        size_t o = 0;

        if (size == 0)
                return;
        for (;;) {
                const char *scheme = strstr(p, "://"), *authority, *at;
                size_t n;

                if (!scheme) {
                        append(buf, size, &o, p, strlen(p));
                        break;
                }
                authority = scheme + 3;
                append(buf, size, &o, p, (size_t) (authority - p));
                /* libnats takes everything up to the URL's last '@' as user and password, '/' and
                 * '@' included: so does this, up to where a list or the text around the URL goes on. */
                n = strcspn(authority, " \t\r\n,\"'");
                at = memrchr(authority, '@', n);
                if (at) {
                        append(buf, size, &o, "…", strlen("…"));
                        p = at;
                } else
                        p = authority;
        }
        buf[o] = 0;
}

void servers_redact_url(const char *url, char *buf, size_t size) {
        const char *at = strrchr(url, '@'), *scheme = strstr(url, "://");
        size_t o = 0;

        if (size == 0)
                return;
        if (!at) {
                append(buf, size, &o, url, strlen(url));
        } else {
                /* Without a scheme, libnats reads "USER:PASSWORD@HOST" all the same. */
                if (scheme && scheme < at)
                        append(buf, size, &o, url, (size_t) (scheme + 3 - url));
                append(buf, size, &o, "…", strlen("…"));
                append(buf, size, &o, at, strlen(at));
        }
        buf[o] = 0;
}
