/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The checks tpctl makes on a trace-cmd data file before libtracecmd reads it. libtracecmd 1.3
 * trusts the sizes, counts, offsets and strings in a file: it allocates what they say (gigabytes,
 * from a file of a few KiB), strdup()s text that need not end, maps CPU data beyond the end of the
 * file, and some of its error paths then crash (tracecmd_close() of a half-opened file). What is
 * checked here is what libtracecmd and libtraceevent read as they read it (trace-cmd.dat(5)):
 * magic, version 6 or 7, byte order, long and page size; the sizes and counts of the header,
 * format, symbol, printk and name sections (and printk lines libtraceevent can parse); every
 * option; where each CPU's data lies, and that every page of it walks as tpd walks pages live.
 * Version 7's options and sections are followed from section to section and uncompressed (zstd,
 * zlib), its CPU data chunk by chunk. Latency traces, event hooks, process maps and guests are
 * refused: replay shows none of them. tests/fuzz/README.md lists the faults each check keeps away.
 */

/* 0 when the file is sane; -EBADMSG with *ret_why (static text) when not; another
 * negative errno when it cannot be read. */
int datcheck_file(int fd, const char **ret_why);
