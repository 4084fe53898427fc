/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The checks tpctl makes on a trace-cmd data file before libtracecmd reads it. libtracecmd 1.3
 * trusts the sizes and counts in a file: it allocates what they say (gigabytes, from a file of a
 * few KiB), and some of its error paths then crash (tracecmd_close() after a failed allocation).
 * What is checked here is the start that every file has (trace-cmd.dat(5)): magic, version 6 or
 * 7, byte order, long and page size, the compression of version 7 and where its options start;
 * for version 6 also the sizes and counts of its sections, its options (those libtracecmd reads
 * without looking at their size), where each CPU's data lies, and that every page of it walks as
 * tpd walks pages live. Version 7's options and sections are compressed: past the header of its
 * first options section and the sizes of its compressed block, they are left to libtracecmd, in
 * the child process of replay that turns a crash into an error.
 */

/* 0 when the file's start is sane; -EBADMSG with *ret_why (static text) when not; another
 * negative errno when it cannot be read. */
int datcheck_file(int fd, const char **ret_why);
