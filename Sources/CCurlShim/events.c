#include "CCurlShim.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

// Ready sockets taken per wait; more stay ready for the next one.
#define XFER_EVENTS_BATCH 128

// A socket's state in the epoll set, by descriptor.
enum { XFER_SOCKET_UNKNOWN = 0, XFER_SOCKET_WATCHED = 1, XFER_SOCKET_PARKED = 2 };

struct xfer_events {
    CURLM *multi;
    int epoll;
    int wake;
    // What curl last said of each descriptor; grown as descriptors come.
    unsigned char *sockets;
    int sockets_capacity;
    // curl's timer as a CLOCK_MONOTONIC deadline in ms; -1: none.
    long long deadline_ms;
    int ready_count;
    struct epoll_event ready[XFER_EVENTS_BATCH];
};

static long long now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static void set_socket(struct xfer_events *events, curl_socket_t socket, unsigned char state) {
    if (socket < 0) return;
    if (socket >= events->sockets_capacity) {
        int capacity = events->sockets_capacity ? events->sockets_capacity : 256;
        while (capacity <= socket) capacity *= 2;
        unsigned char *grown = realloc(events->sockets, capacity);
        if (grown == NULL) return;
        memset(grown + events->sockets_capacity, 0, capacity - events->sockets_capacity);
        events->sockets = grown;
        events->sockets_capacity = capacity;
    }
    events->sockets[socket] = state;
}

static unsigned char socket_state(struct xfer_events *events, curl_socket_t socket) {
    return socket >= 0 && socket < events->sockets_capacity ? events->sockets[socket] : XFER_SOCKET_UNKNOWN;
}

// curl says which sockets to watch, and for what. A connection curl stops
// watching (a request done, the connection kept for the next) stays in the
// epoll set, parked: curl watches it again for its next request, with one
// EPOLL_CTL_MOD instead of a DEL and an ADD. A parked socket that becomes
// ready (the server closed it) is taken out then (`xfer_events_act`). One
// curl closes leaves the set by itself: a later socket on its descriptor
// is not in it, and is added.
static int on_socket(CURL *easy, curl_socket_t socket, int what, void *user, void *socket_user) {
    (void)easy;
    (void)socket_user;
    struct xfer_events *events = user;
    if (what == CURL_POLL_REMOVE) {
        if (socket_state(events, socket) == XFER_SOCKET_WATCHED) set_socket(events, socket, XFER_SOCKET_PARKED);
        return 0;
    }
    struct epoll_event event = {0};
    event.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
    event.data.fd = socket;
    int known = socket_state(events, socket) != XFER_SOCKET_UNKNOWN;
    if (epoll_ctl(events->epoll, known ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, socket, &event) != 0) {
        // Closed and its descriptor taken by a new socket (not in the set), or the other way.
        int retry = errno == ENOENT ? EPOLL_CTL_ADD : errno == EEXIST ? EPOLL_CTL_MOD : -1;
        if (retry < 0 || epoll_ctl(events->epoll, retry, socket, &event) != 0) return -1;
    }
    set_socket(events, socket, XFER_SOCKET_WATCHED);
    return 0;
}

// curl's one timer: when it wants `socket_action(CURL_SOCKET_TIMEOUT)` next.
static int on_timer(CURLM *multi, long timeout_ms, void *user) {
    (void)multi;
    struct xfer_events *events = user;
    events->deadline_ms = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    return 0;
}

xfer_events *xfer_events_open(CURLM *multi) {
    struct xfer_events *events = calloc(1, sizeof *events);
    if (events == NULL) return NULL;
    events->multi = multi;
    events->deadline_ms = -1;
    events->epoll = epoll_create1(EPOLL_CLOEXEC);
    events->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event wake = {0};
    wake.events = EPOLLIN;
    wake.data.fd = events->wake;
    if (events->epoll < 0 || events->wake < 0 || epoll_ctl(events->epoll, EPOLL_CTL_ADD, events->wake, &wake) != 0
        || curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, on_socket) != CURLM_OK
        || curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, events) != CURLM_OK
        || curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, on_timer) != CURLM_OK
        || curl_multi_setopt(multi, CURLMOPT_TIMERDATA, events) != CURLM_OK) {
        int saved = errno;
        xfer_events_close(events);
        errno = saved;
        return NULL;
    }
    return events;
}

void xfer_events_close(xfer_events *events) {
    if (events == NULL) return;
    if (events->epoll >= 0) close(events->epoll);
    if (events->wake >= 0) close(events->wake);
    free(events->sockets);
    free(events);
}

void xfer_events_wake(xfer_events *events) {
    uint64_t one = 1;
    // EAGAIN: the counter is full, so a wake is pending anyway.
    ssize_t written = write(events->wake, &one, sizeof one);
    (void)written;
}

long xfer_events_timer_ms(xfer_events *events) {
    if (events->deadline_ms < 0) return -1;
    long long left = events->deadline_ms - now_ms();
    return left > 0 ? (long)left : 0;
}

int xfer_events_wait(xfer_events *events, int timeout_ms) {
    long timer = xfer_events_timer_ms(events);
    if (timer >= 0 && timer < timeout_ms) timeout_ms = (int)timer;
    int count;
    do {
        count = epoll_wait(events->epoll, events->ready, XFER_EVENTS_BATCH, timeout_ms);
    } while (count < 0 && errno == EINTR);
    events->ready_count = count < 0 ? 0 : count;
    return events->ready_count;
}

void xfer_events_act(xfer_events *events) {
    int running = 0;
    for (int index = 0; index < events->ready_count; index++) {
        struct epoll_event *ready = &events->ready[index];
        if (ready->data.fd == events->wake) {
            uint64_t count;
            ssize_t drained = read(events->wake, &count, sizeof count);
            (void)drained;
            continue;
        }
        if (socket_state(events, ready->data.fd) == XFER_SOCKET_PARKED) {
            // A kept connection that curl does not watch: closed by the server, or
            // talking out of turn. Out of the set; curl finds it dead when it reuses it.
            epoll_ctl(events->epoll, EPOLL_CTL_DEL, ready->data.fd, NULL);
            set_socket(events, ready->data.fd, XFER_SOCKET_UNKNOWN);
            continue;
        }
        int flags = ((ready->events & EPOLLIN) ? CURL_CSELECT_IN : 0) | ((ready->events & EPOLLOUT) ? CURL_CSELECT_OUT : 0)
            | ((ready->events & (EPOLLERR | EPOLLHUP)) ? CURL_CSELECT_ERR : 0);
        curl_multi_socket_action(events->multi, ready->data.fd, flags, &running);
    }
    events->ready_count = 0;
    if (events->deadline_ms >= 0 && now_ms() >= events->deadline_ms) {
        events->deadline_ms = -1;
        curl_multi_socket_action(events->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    }
}
