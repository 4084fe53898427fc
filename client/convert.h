/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "options.h"

/*
 * `tpctl convert IN OUT`: a capture (a trace-cmd data file or tpctl's NDJSON) written as a Perfetto
 * trace (perfetto.h), its records read by `tpctl replay` in a child; or NDJSON written as a
 * trace-cmd data file (datconvert.h). OUT is made as a capture's files are (capdir.h).
 */

/* Returns the exit status. */
int convert_verb(const CommonOptions *c, char **args, size_t n);
