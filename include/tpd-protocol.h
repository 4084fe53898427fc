/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * What tpd and tpctl share: the Varlink interface name, method and error ids, the default socket
 * path and the limits both sides enforce. Nothing else belongs here.
 */

#define TPD_SOCKET_DEFAULT "/run/tpd/io.tpd.tracing"
#define TPD_SOCKET_ENV "TPD_SOCKET"

#define TPD_INTERFACE "io.tpd.tracing"
#define TPD_METHOD(m) TPD_INTERFACE "." m

#define VARLINK_SERVICE "org.varlink.service"
#define VARLINK_METHOD_GET_INFO VARLINK_SERVICE ".GetInfo"
#define VARLINK_METHOD_GET_INTERFACE_DESCRIPTION VARLINK_SERVICE ".GetInterfaceDescription"

#define VARLINK_ERROR_INTERFACE_NOT_FOUND VARLINK_SERVICE ".InterfaceNotFound"
#define VARLINK_ERROR_METHOD_NOT_FOUND VARLINK_SERVICE ".MethodNotFound"
#define VARLINK_ERROR_INVALID_PARAMETER VARLINK_SERVICE ".InvalidParameter"
#define VARLINK_ERROR_PERMISSION_DENIED VARLINK_SERVICE ".PermissionDenied"
#define VARLINK_ERROR_EXPECTED_MORE VARLINK_SERVICE ".ExpectedMore"

#define TPD_ERROR_NO_SUCH_EVENT TPD_INTERFACE ".NoSuchEvent"
#define TPD_ERROR_INVALID_FILTER TPD_INTERFACE ".InvalidFilter"
#define TPD_ERROR_TRACEFS_UNAVAILABLE TPD_INTERFACE ".TracefsUnavailable"
#define TPD_ERROR_LIMIT_EXCEEDED TPD_INTERFACE ".LimitExceeded"

/* A control message (call or reply) larger than this closes the connection. */
#define TPD_MESSAGE_MAX (64U * 1024U)

/* Longest "system:event" name accepted; tracefs names are far shorter. */
#define TPD_EVENT_NAME_MAX 256U

/* Longest filter expression accepted, kernel-side or per stream. */
#define TPD_FILTER_MAX 4096U

/* Exit code of `tpctl stream` when the daemon went away mid-stream (EX_UNAVAILABLE). */
#define TPD_EXIT_DAEMON_GONE 69
