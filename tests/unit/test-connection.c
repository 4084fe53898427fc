/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * tpctl's connection (client/connection.c) against a stand-in for tpd on a Unix socket: fds that
 * come with a reply (its first bytes in a write of their own, the rest after) are kept with it and
 * taken by index once; those not taken are closed with the next reply; a reply without fds reads
 * as before; more fds than a reply can bring are an error, and none stays open.
 */

#include <dirent.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "connection.h"
#include "tpd-test.h"

static ino_t inode_of(int fd) {
        struct stat st;

        ASSERT(fstat(fd, &st) == 0);
        return st.st_ino;
}

static size_t open_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        size_t n = 0;

        ASSERT(d);
        while (readdir(d))
                n++;
        closedir(d);
        return n;
}

/* Reads one call, up to its NUL. */
static void read_call(int fd) {
        char c;

        do
                ASSERT(read(fd, &c, 1) == 1);
        while (c != '\0');
}

static void send_with_fds(int fd, const char *text, size_t len, const int *fds, size_t n_fds) {
        union {
                struct cmsghdr cmsg;
                char buf[CMSG_SPACE(sizeof(int) * 3)];
        } control = {};
        struct iovec iov = { (void *) text, len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

        if (n_fds > 0) {
                mh.msg_control = &control;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
                control.cmsg = (struct cmsghdr){ .cmsg_len = CMSG_LEN(sizeof(int) * n_fds),
                                                 .cmsg_level = SOL_SOCKET,
                                                 .cmsg_type = SCM_RIGHTS };
                memcpy(CMSG_DATA(&control.cmsg), fds, sizeof(int) * n_fds);
        }
        ASSERT(sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t) len);
}

static void serve(int listener, const int *files) {
        static const char reply1[] = "{\"parameters\":{\"ring\":{\"fd\":0},\"reader\":{\"fd\":1}}}";
        static const char reply2[] = "{\"parameters\":{\"x\":1}}";
        int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);

        ASSERT(fd >= 0);
        /* The fds with the first bytes, the rest in a later write. */
        read_call(fd);
        send_with_fds(fd, reply1, 5, files, 2);
        usleep(10000);
        send_with_fds(fd, reply1 + 5, sizeof(reply1) - 5, NULL, 0);
        read_call(fd);
        send_with_fds(fd, reply2, sizeof(reply2), NULL, 0);
        read_call(fd);
        send_with_fds(fd, reply1, sizeof(reply1), files, 3);
        close(fd);
}

int main(void) {
        char dir[] = "/tmp/test-connection-XXXXXX", path[64];
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        Connection c = CONNECTION_NULL;
        VarlinkReply reply = {};
        int files[3], pipefd[2], listener, fd, status, unclaimed;
        size_t before;
        pid_t pid;

        ASSERT(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/socket", dir);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT(listener >= 0);
        ASSERT(bind(listener, (struct sockaddr *) &sa, sizeof(sa)) == 0);
        ASSERT(listen(listener, 1) == 0);

        files[0] = memfd_create("ring", MFD_CLOEXEC);
        ASSERT(files[0] >= 0);
        ASSERT(pipe2(pipefd, O_CLOEXEC) == 0);
        files[1] = pipefd[0];
        files[2] = pipefd[1];

        pid = fork();
        ASSERT(pid >= 0);
        if (pid == 0) {
                serve(listener, files);
                _exit(0);
        }
        close(listener);
        before = open_fds();

        ASSERT_INT_EQ(
                connection_call(&c, path, "io.tpd.tracing.Test", json_object_new_object(), false, &reply),
                0);
        ASSERT_INT_EQ(c.n_fds, 2);
        fd = connection_take_fd(&c, 0);
        ASSERT(fd >= 0);
        ASSERT(inode_of(fd) == inode_of(files[0]));
        ASSERT(fcntl(fd, F_GETFD) == FD_CLOEXEC);
        ASSERT_INT_EQ(connection_take_fd(&c, 0), -ENXIO);
        ASSERT_INT_EQ(connection_take_fd(&c, 2), -ENXIO);
        unclaimed = c.fds[1];
        ASSERT(inode_of(unclaimed) == inode_of(files[1]));
        close(fd);
        varlink_reply_done(&reply);

        /* A reply without fds: the one not taken is closed. */
        ASSERT_INT_EQ(connection_call_again(&c, "io.tpd.tracing.Test", json_object_new_object(), &reply), 0);
        ASSERT(fcntl(unclaimed, F_GETFD) < 0 && errno == EBADF);
        ASSERT_INT_EQ(c.n_fds, 0);
        ASSERT_INT_EQ(connection_take_fd(&c, 0), -ENXIO);
        ASSERT_INT_EQ(reply_int(reply.parameters, "x", NULL), 1);
        varlink_reply_done(&reply);

        /* Three fds: cut short by the kernel, an error. */
        ASSERT_INT_EQ(connection_call_again(&c, "io.tpd.tracing.Test", json_object_new_object(), &reply),
                      -EBADMSG);
        connection_done(&c);
        ASSERT_INT_EQ(open_fds(), before);

        ASSERT(waitpid(pid, &status, 0) == pid);
        ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        unlink(path);
        rmdir(dir);
        return 0;
}
