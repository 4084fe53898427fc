/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stdio.h>

#include <json-c/json.h>

#include "options.h"

/*
 * tpd's counters (a GetStatus reply) as metrics for Prometheus: in the Prometheus text format
 * (version 0.0.4, what node_exporter's textfile collector and `promtool check metrics` read), or
 * with openmetrics in the OpenMetrics 1.0 text format (counter families named without "_total",
 * their samples with it, and "# EOF" at the end). With json (an array), the samples are added to
 * it instead, each as {"name":…,"labels":{…},"value":…}. Returns 0 or -ENOMEM.
 */
int metrics_write(FILE *f, json_object *status, bool openmetrics, json_object *json);

/* --openmetrics. */
extern const OptionTable metrics_option_table;

/* `tpctl metrics`: GetStatus as metrics on stdout. Returns the exit status. */
int metrics_verb(const CommonOptions *c, char **args, size_t n);
