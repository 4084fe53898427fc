/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * `tpctl convert IN OUT.dat`: tpctl's NDJSON (a capture of `tpctl record`, or what `tpctl stream`
 * printed) written as a trace-cmd data file, as `tpctl record -o OUT.dat` writes one (datfile.c),
 * so that `tpctl replay OUT.dat` prints the records again. NDJSON names events but has no formats:
 * each event's is read from the tracefs of the kernel tpctl runs on (a capture of another kernel
 * converts where its formats are the same), and each record is packed into its bytes by the
 * decoder's inverse (core/pack.c).
 */

/* Writes the NDJSON capture in as name in dir_fd (never over a file). Returns the exit status. */
int convert_to_dat(const char *in, int dir_fd, const char *name);
