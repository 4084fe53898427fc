/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "build-config.h"
#include "manager.h"

/*
 * The configuration files: /etc/tpd/tpd.conf, then the .conf files of /etc/tpd/tpd.conf.d/ in name order,
 * systemd style. Sections hold Key=Value lines; '#' and ';' start comments. A later assignment
 * wins; Events= accumulates (space-separated names or globs) and an empty Events= resets the list.
 * Unknown sections and keys are warned about and ignored; an invalid value is an error that names
 * the file and line.
 */

#define CONFIG_FILE_DEFAULT TPD_SYSCONFDIR "/tpd/tpd.conf"

/* Shared with the command line: the same checks for the same settings. */
bool config_instance_name_is_valid(const char *name);
int config_parse_unsigned(const char *value, unsigned min, unsigned max, unsigned *ret);
int config_set_string(char **dst, const char *value);

/* Parses one file into c. Returns 0, -ENOENT when it does not exist, or -EINVAL after logging
 * "file:line: reason". */
int config_parse_file(const char *path, ManagerConfig *c);

/* Parses path and then its drop-in directory path.d/ (files ending in .conf). A missing main file
 * is fine: the defaults and drop-ins apply. */
int config_load(const char *path, ManagerConfig *c);
