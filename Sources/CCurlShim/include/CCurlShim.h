#ifndef XFER_CCURLSHIM_H
#define XFER_CCURLSHIM_H

// Typed, non-variadic front doors to libcurl's variadic setopt/getinfo calls,
// which Swift cannot call. One wrapper per argument kind; nothing else.

#include <curl/curl.h>

CURLcode xfer_easy_setopt_long(CURL *easy, CURLoption option, long value);
CURLcode xfer_easy_setopt_off_t(CURL *easy, CURLoption option, curl_off_t value);
CURLcode xfer_easy_setopt_pointer(CURL *easy, CURLoption option, void *value);
CURLcode xfer_easy_setopt_string(CURL *easy, CURLoption option, const char *value);
CURLcode xfer_easy_setopt_slist(CURL *easy, CURLoption option, struct curl_slist *value);

CURLcode xfer_easy_setopt_write_callback(CURL *easy, curl_write_callback callback);
CURLcode xfer_easy_setopt_read_callback(CURL *easy, curl_read_callback callback);
CURLcode xfer_easy_setopt_seek_callback(CURL *easy, curl_seek_callback callback);
CURLcode xfer_easy_setopt_header_callback(CURL *easy, curl_write_callback callback);
CURLcode xfer_easy_setopt_xferinfo_callback(CURL *easy, curl_xferinfo_callback callback);

CURLcode xfer_easy_getinfo_long(CURL *easy, CURLINFO info, long *value);
CURLcode xfer_easy_getinfo_off_t(CURL *easy, CURLINFO info, curl_off_t *value);
CURLcode xfer_easy_getinfo_pointer(CURL *easy, CURLINFO info, void **value);
CURLcode xfer_easy_getinfo_string(CURL *easy, CURLINFO info, const char **value);

CURLMcode xfer_multi_setopt_long(CURLM *multi, CURLMoption option, long value);

/// Pops the next "transfer done" message; returns 1 and fills `easy` and
/// `result` when there was one, 0 when the queue is empty. Hides CURLMsg's
/// anonymous union from Swift.
int xfer_multi_next_done(CURLM *multi, CURL **easy, CURLcode *result);

/// The multi handle driven by events (`curl_multi_socket_action`) rather
/// than by `curl_multi_perform`, which walks every transfer on each call:
/// an epoll set holds the sockets curl asks to watch (its socket callback),
/// an eventfd wakes the wait from other threads, and curl's one timer (its
/// timer callback) is kept as a deadline. Used by one thread; only
/// `xfer_events_wake` may be called from others.
typedef struct xfer_events xfer_events;

/// Makes the epoll set and the eventfd and hands curl the two callbacks.
/// NULL on failure (errno set).
xfer_events *xfer_events_open(CURLM *multi);

/// Closes the epoll set and the eventfd. After `curl_multi_cleanup`.
void xfer_events_close(xfer_events *events);

/// Wakes a thread in (or about to enter) `xfer_events_wait`. Any thread.
void xfer_events_wake(xfer_events *events);

/// Waits up to `timeout_ms` (0: only looks), less when curl's timer is due
/// sooner, for sockets curl watches or a wake; keeps what was ready for
/// `xfer_events_act`. Returns the number of sockets ready.
int xfer_events_wait(xfer_events *events, int timeout_ms);

/// Lets curl act on each socket `xfer_events_wait` found ready, then on
/// its timer if due: transfers progress, callbacks run, in here.
void xfer_events_act(xfer_events *events);

/// Milliseconds until curl's timer is due: -1 when none, 0 when due.
long xfer_events_timer_ms(xfer_events *events);

#endif
