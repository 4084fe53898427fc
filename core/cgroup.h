/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Paths of the cgroup v2 hierarchy (the unified one, also in the hybrid layout), as the kernel
 * writes them: "/" the root, "/system.slice/ssh.service" below it; in /proc/PID/cgroup on the
 * line "0::PATH", and in sched's cgroup_attach_task records (dst_root 0) as dst_path.
 * Pure code.
 */

/* The longest path a stream may name. */
#define CGROUP_PATH_MAX 4096U

/* Whether s is a path as the kernel writes one: absolute, no empty, "." or ".." component, no
 * trailing '/' (except "/" itself), no control byte, shorter than CGROUP_PATH_MAX. */
bool cgroup_path_valid(const char *s);

/* Whether path (len bytes, not NUL-terminated) is root or below it. */
bool cgroup_in_subtree(const char *path, size_t len, const char *root);

/* A set of cgroup ids (the kernel's cgroup_id(), a directory's inode number): sorted in place,
 * then looked up. */
void cgroup_ids_sort(uint64_t *ids, size_t n);
bool cgroup_ids_contain(const uint64_t *ids, size_t n, uint64_t id);

/* The v2 path in the text of /proc/PID/cgroup (n bytes): the line "0::PATH". Returns whether there
 * is one; *ret points into text. */
bool cgroup_v2_line(const char *text, size_t n, const char **ret, size_t *ret_len);

/* The systemd unit a cgroup path (len bytes) belongs to: its deepest component that names a unit
 * (ends in .service, .scope, .slice, .socket, .mount or .swap), as systemd-cgls groups it;
 * "-.slice", the root slice, when none does. Returns the name's length, *ret pointing into path
 * (or to a constant). */
size_t cgroup_unit(const char *path, size_t len, const char **ret);
