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

#endif
