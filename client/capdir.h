/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <sys/stat.h>

/*
 * The files of a capture, which hold kernel data and are the recording user's alone: every name
 * tpctl creates, finishes or removes is relative to a directory opened once (the output's), made
 * 0600 (directories 0700), never over a name that exists and never through a symbolic link. A name
 * planted by someone else is refused, not written through; only files this run made are removed.
 */

/* Opens the directory of output (O_PATH is not enough: files are made in it) and returns its fd and
 * output's last component, which must be a plain name. */
int capdir_open(const char *output, int *ret_dirfd, char **ret_name);

/* Creates name in dirfd for writing (flags: O_WRONLY or O_RDWR), mode 0600: -EEXIST when the name
 * exists, whatever it is (a link included). */
int capdir_create(int dirfd, const char *name, int flags);

/* Makes a directory PREFIX + six random characters in dirfd, mode 0700; returns its name and an fd
 * of it. */
int capdir_mkdtemp(int dirfd, const char *prefix, char **ret_name, int *ret_fd);

/* Creates a file PREFIX + six random characters in dirfd, as capdir_create(); returns its name. */
int capdir_mktemp(int dirfd, const char *prefix, int flags, char **ret_name);

/* Moves from (in from_dirfd) to to (in to_dirfd), on one file system. Without replace, -EEXIST when
 * to exists; with replace, the name is replaced (a link itself, never what it points to). */
int capdir_move(int from_dirfd, const char *from, int to_dirfd, const char *to, bool replace);

/* Removes name from dirfd if it is still the regular file st describes (the file tpctl wrote):
 * 0, or -ESTALE when something else is there now (left alone). */
int capdir_remove_file(int dirfd, const char *name, const struct stat *st);

/* Removes the directory name and everything in it, without following links. */
int capdir_remove_tree(int dirfd, const char *name);

/* Whether dirfd holds a name of a rotation of STEM + ext: STEM-NNNN + ext, four or more digits.
 * Returns 1 and the name, 0, or a negative errno. */
int capdir_find_rotated(int dirfd, const char *stem, const char *ext, char **ret_name);
