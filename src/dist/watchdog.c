/* The collective watchdog: a rank that waits too long in a collective or a receive says who it
 * is waiting for, and, past the timeout, ends.
 *
 * dist.c tells it when each wait starts and ends (watchdog.h). Two threads per rank, started
 * by it_dist_watchdog_start after every rank has published a probe address (a TCP port on the
 * address its MPI traffic uses) and its hostname:
 *  - the responder answers peers' probes: this rank's step, how many collectives it has
 *    entered on the asked group, and the wait it is in;
 *  - the checker looks at the current wait ten times a second. Past --collective_warn_s it
 *    probes the peers once and prints a flight-recorder line: the step, the collective, its
 *    group and bytes, and each peer that has not arrived (its host, and whether it is at an
 *    earlier collective, computing, not running or unreachable). Past --collective_timeout_s
 *    it prints the same line and ends the process (IT_DIST_TIMEOUT_EXIT); mpirun then ends
 *    the job. A stop signal during a wait (the launcher ending the job because a rank died)
 *    prints the line too, before the process goes.
 * The threads make no MPI calls, so a link that MPI is stuck on does not stop them; the
 * probes give up after a second, and a peer that cannot be reached is named so. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "dist/watchdog.h"
#include "infinitrain/dist.h"

#define WATCH_GROUPS 256
#define PROBE_S 1.0 /* how long a probe waits for a peer's answer */
#define HOST_LEN 64

/* What a rank publishes: where its responder listens, and its host's name. */
typedef struct watch_peer {
    uint32_t addr; /* IPv4, network order */
    uint16_t port; /* network order */
    char host[HOST_LEN];
} watch_peer;

/* The wait in progress (under mu). */
typedef struct watch_wait {
    int depth; /* nested waits belong to the outermost */
    int gid, n, me, peer;
    const char *label, *op;
    const int *wrank;
    size_t bytes;
    uint64_t seq; /* the group's collective number this wait is (1-based) */
    struct timespec t0;
    bool warned;
} watch_wait;

static struct {
    pthread_mutex_t mu;
    uint64_t entered[WATCH_GROUPS]; /* collectives entered, per group */
    uint64_t members[WATCH_GROUPS]; /* a hash of each group's world ranks */
    int ngroups;
    watch_wait w;
    double waited_ms; /* the outermost waits' total */
    int64_t step;
    /* set by it_dist_watchdog_start */
    bool running;
    char app[32];
    double warn_s, timeout_s;
    int rank, world;
    watch_peer *peers;
    int listen_fd;
    int wake[2]; /* the checker's self-pipe: stop, or a signal */
    atomic_int stop, signal;
    pthread_t responder, checker;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .listen_fd = -1, .wake = {-1, -1}};

static double since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
}

static uint64_t members_hash(const int *wrank, int n) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)(uint32_t)wrank[i]) * 1099511628211ull;
    return h;
}

int it__watch_register(const int *wrank, int n) {
    pthread_mutex_lock(&g.mu);
    int gid = g.ngroups < WATCH_GROUPS ? g.ngroups++ : -1;
    if (gid >= 0) g.members[gid] = members_hash(wrank, n), g.entered[gid] = 0;
    pthread_mutex_unlock(&g.mu);
    return gid;
}

void it__watch_enter(int gid, const char *label, const int *wrank, int n, int me, const char *op, size_t bytes,
                     int peer) {
    pthread_mutex_lock(&g.mu);
    if (g.w.depth++ == 0) {
        uint64_t seq = 0;
        if (gid >= 0 && peer < 0) seq = ++g.entered[gid];
        g.w = (watch_wait){.depth = 1,
                           .gid = gid,
                           .n = n,
                           .me = me,
                           .peer = peer,
                           .label = label,
                           .op = op,
                           .wrank = wrank,
                           .bytes = bytes,
                           .seq = seq};
        clock_gettime(CLOCK_MONOTONIC, &g.w.t0);
    }
    pthread_mutex_unlock(&g.mu);
}

void it__watch_leave(void) {
    pthread_mutex_lock(&g.mu);
    if (g.w.depth > 0 && --g.w.depth == 0) g.waited_ms += 1000.0 * since(&g.w.t0);
    pthread_mutex_unlock(&g.mu);
}

double it_dist_waited_ms(void) {
    pthread_mutex_lock(&g.mu);
    double ms = g.waited_ms;
    pthread_mutex_unlock(&g.mu);
    return ms;
}

void it_dist_watchdog_step(int64_t step) {
    pthread_mutex_lock(&g.mu);
    g.step = step;
    pthread_mutex_unlock(&g.mu);
}

const char *it_dist_host_of(int world_rank) {
    return g.peers && world_rank >= 0 && world_rank < g.world ? g.peers[world_rank].host : "?";
}

/* ---- the responder: one line in ("GID HASH"), one line out ------------------------------ */

/* "STEP ENTERED INOP SECONDS OP LABEL": ENTERED is -1 when this rank has no group GID with
 * those members. */
static void answer(int fd) {
    struct pollfd p = {fd, POLLIN, 0};
    char in[64] = "", out[256];
    if (poll(&p, 1, 500) <= 0) return;
    ssize_t k = recv(fd, in, sizeof in - 1, 0);
    if (k <= 0) return;
    in[k] = 0;
    int gid = -1;
    unsigned long long hash = 0;
    if (sscanf(in, "%d %llu", &gid, &hash) != 2) return;
    pthread_mutex_lock(&g.mu);
    long long entered = gid >= 0 && gid < g.ngroups && g.members[gid] == hash ? (long long)g.entered[gid] : -1;
    bool in_op = g.w.depth > 0;
    snprintf(out, sizeof out, "%lld %lld %d %.1f %s %s\n", (long long)g.step, entered, in_op,
             in_op ? since(&g.w.t0) : 0.0, in_op ? g.w.op : "-", in_op && g.w.label ? g.w.label : "-");
    pthread_mutex_unlock(&g.mu);
    (void)!send(fd, out, strlen(out), MSG_NOSIGNAL);
}

static void *responder_main(void *arg) {
    (void)arg;
    while (!atomic_load(&g.stop)) {
        struct pollfd p = {g.listen_fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0) continue;
        int fd = accept(g.listen_fd, NULL, NULL);
        if (fd < 0) continue;
        answer(fd);
        close(fd);
    }
    return NULL;
}

/* ---- probing the peers of a wait ------------------------------------------------------- */

typedef struct probe {
    int wrank, fd;
    enum { P_CONNECTING, P_SENT, P_DONE } state;
    char reply[256];
    size_t got;
    const char *fail; /* NULL: reply holds the answer */
} probe;

/* Ask every peer in p[0..n-1] at once; each ends answered, refused or silent within PROBE_S. */
static void probe_all(probe *p, int n, int gid, uint64_t hash) {
    char ask[64];
    snprintf(ask, sizeof ask, "%d %llu\n", gid, (unsigned long long)hash);
    for (int i = 0; i < n; i++) {
        const watch_peer *w = &g.peers[p[i].wrank];
        p[i].fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        p[i].state = P_CONNECTING;
        p[i].fail = NULL;
        p[i].got = 0;
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = w->port, .sin_addr.s_addr = w->addr};
        if (p[i].fd < 0 || (connect(p[i].fd, (struct sockaddr *)&a, sizeof a) && errno != EINPROGRESS)) {
            p[i].fail = errno == ECONNREFUSED ? "not running" : "unreachable";
            p[i].state = P_DONE;
        }
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct pollfd *pf = calloc((size_t)(n > 0 ? n : 1), sizeof *pf);
    for (; pf;) {
        int live = 0;
        for (int i = 0; i < n; i++) {
            pf[i] =
                (struct pollfd){p[i].state == P_DONE ? -1 : p[i].fd, p[i].state == P_CONNECTING ? POLLOUT : POLLIN, 0};
            live += p[i].state != P_DONE;
        }
        double left = PROBE_S - since(&t0);
        if (!live || left <= 0) break;
        if (poll(pf, (nfds_t)n, (int)(left * 1000) + 1) <= 0) continue;
        for (int i = 0; i < n; i++) {
            if (p[i].state == P_DONE || !pf[i].revents) continue;
            if (p[i].state == P_CONNECTING) {
                int err = 0;
                socklen_t len = sizeof err;
                getsockopt(p[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
                if (err || send(p[i].fd, ask, strlen(ask), MSG_NOSIGNAL) < 0) {
                    p[i].fail = err == ECONNREFUSED ? "not running" : "unreachable";
                    p[i].state = P_DONE;
                } else
                    p[i].state = P_SENT;
                continue;
            }
            ssize_t k = recv(p[i].fd, p[i].reply + p[i].got, sizeof p[i].reply - 1 - p[i].got, 0);
            if (k > 0) p[i].got += (size_t)k;
            p[i].reply[p[i].got] = 0;
            if (k <= 0 || strchr(p[i].reply, '\n')) {
                if (!strchr(p[i].reply, '\n')) p[i].fail = "not answering";
                p[i].state = P_DONE;
            }
        }
    }
    for (int i = 0; i < n; i++) {
        if (p[i].state != P_DONE) p[i].fail = p[i].state == P_CONNECTING ? "unreachable" : "not answering";
        if (p[i].fd >= 0) close(p[i].fd);
    }
    free(pf);
}

/* One peer's part of the line: "rank 2 (host: what it is doing)", or "" when it has arrived
 * at this collective. */
static void describe(const probe *p, const watch_wait *w, char *out, size_t cap) {
    const char *host = g.peers[p->wrank].host;
    *out = 0;
    if (p->fail) {
        snprintf(out, cap, "rank %d (%s: %s)", p->wrank, host, p->fail);
        return;
    }
    long long step = 0, entered = 0;
    int in_op = 0;
    double secs = 0;
    char op[64] = "-", label[32] = "-";
    if (sscanf(p->reply, "%lld %lld %d %lf %63s %31s", &step, &entered, &in_op, &secs, op, label) < 4) {
        snprintf(out, cap, "rank %d (%s: a garbled answer)", p->wrank, host);
        return;
    }
    if (w->peer < 0 && entered >= 0 && (uint64_t)entered >= w->seq) return; /* arrived */
    if (in_op)
        snprintf(out, cap, "rank %d (%s: step %lld, in %s on %s for %.1f s)", p->wrank, host, step, op, label, secs);
    else
        snprintf(out, cap, "rank %d (%s: step %lld, computing)", p->wrank, host, step);
}

/* The flight-recorder line for wait w (a copy), `why` first. */
static void report(const watch_wait *w, double waited, const char *why, const char *tail) {
    int n = w->peer >= 0 ? 1 : w->n - 1;
    probe *p = calloc((size_t)(n > 0 ? n : 1), sizeof *p);
    if (!p) return;
    for (int i = 0, k = 0; i < w->n && k < n; i++)
        if (w->peer >= 0 ? i == w->peer : i != w->me) p[k++].wrank = w->wrank[i];
    uint64_t hash = members_hash(w->wrank, w->n);
    probe_all(p, n, w->gid, hash);
    char line[4096], part[256], size[32];
    int64_t step;
    pthread_mutex_lock(&g.mu);
    step = g.step;
    pthread_mutex_unlock(&g.mu);
    double b = (double)w->bytes;
    if (b < 1e3)
        snprintf(size, sizeof size, "%.0f B", b);
    else
        snprintf(size, sizeof size, "%.3g %s",
                 b < 1e6   ? b / 1e3
                 : b < 1e9 ? b / 1e6
                           : b / 1e9,
                 b < 1e6   ? "kB"
                 : b < 1e9 ? "MB"
                           : "GB");
    int len = snprintf(line, sizeof line, "%s: rank %d (%s): %s: step %lld, %s on %s (%d ranks, %s) for %.1f s; ",
                       g.app, g.rank, g.peers[g.rank].host, why, (long long)step, w->op, w->label, w->n, size, waited);
    int late = 0;
    for (int i = 0; i < n && len < (int)sizeof line - 300; i++) {
        describe(&p[i], w, part, sizeof part);
        if (!*part) continue;
        len += snprintf(line + len, sizeof line - (size_t)len, "%s%s", late++ ? ", " : "not arrived: ", part);
    }
    if (!late)
        len += snprintf(line + len, sizeof line - (size_t)len, "%s",
                        w->peer >= 0 ? "the peer is waiting too" : "every peer has arrived (the transfer is slow)");
    snprintf(line + len, sizeof line - (size_t)len, "%s\n", tail);
    (void)!write(STDERR_FILENO, line, strlen(line));
    free(p);
}

static void *checker_main(void *arg) {
    (void)arg;
    while (!atomic_load(&g.stop)) {
        struct pollfd p = {g.wake[0], POLLIN, 0};
        if (poll(&p, 1, 100) > 0) {
            char b[16];
            (void)!read(g.wake[0], b, sizeof b);
        }
        if (atomic_load(&g.stop)) break;
        pthread_mutex_lock(&g.mu);
        watch_wait w = g.w;
        double waited = w.depth ? since(&w.t0) : 0;
        pthread_mutex_unlock(&g.mu);
        int sig = atomic_exchange(&g.signal, 0);
        if (sig && w.depth) {
            char why[64];
            snprintf(why, sizeof why, "stopped by signal %d while waiting", sig);
            report(&w, waited, why, "");
            continue;
        }
        if (!w.depth) continue;
        if (g.timeout_s > 0 && waited >= g.timeout_s) {
            char why[96];
            snprintf(why, sizeof why, "collective timeout (--collective_timeout_s %g)", g.timeout_s);
            char tail[64];
            snprintf(tail, sizeof tail, "; this rank ends (exit status %d)", IT_DIST_TIMEOUT_EXIT);
            report(&w, waited, why, tail);
            _exit(IT_DIST_TIMEOUT_EXIT);
        }
        if (g.warn_s > 0 && waited >= g.warn_s && !w.warned) {
            pthread_mutex_lock(&g.mu);
            bool same = g.w.depth && g.w.t0.tv_sec == w.t0.tv_sec && g.w.t0.tv_nsec == w.t0.tv_nsec;
            if (same) g.w.warned = true;
            pthread_mutex_unlock(&g.mu);
            char why[64];
            snprintf(why, sizeof why, "slow collective (--collective_warn_s %g)", g.warn_s);
            if (same) report(&w, waited, why, "");
        }
    }
    return NULL;
}

void it_dist_watchdog_signal(int sig) {
    if (!g.running) return;
    atomic_store(&g.signal, sig);
    char b = 1;
    (void)!write(g.wake[1], &b, 1);
}

/* ---- start and stop -------------------------------------------------------------------- */

/* The address this rank's MPI traffic uses: inside OpenMPI's btl_tcp_if_include subnet when
 * one is set (a netns cluster, a cluster's data network), else the first address up that is
 * not loopback, else loopback (every rank on this host). */
static uint32_t probe_address(void) {
    uint32_t net = 0, mask = 0, pick = 0;
    const char *inc = getenv("OMPI_MCA_btl_tcp_if_include");
    char cidr[64];
    int bits = 0;
    if (inc && sscanf(inc, "%63[0-9.]/%d", cidr, &bits) == 2 && bits >= 0 && bits <= 32 &&
        inet_pton(AF_INET, cidr, &net) == 1)
        mask = bits ? htonl(~0u << (32 - bits)) : 0;
    else
        inc = NULL;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) == 0) {
        for (struct ifaddrs *i = ifs; i && !pick; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
            uint32_t a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
            bool loop = (ntohl(a) >> 24) == 127;
            if (inc ? (a & mask) == (net & mask) : !loop) pick = a;
        }
        freeifaddrs(ifs);
    }
    return pick ? pick : htonl(INADDR_LOOPBACK);
}

static it_status listen_on(watch_peer *me) {
    g.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof a;
    if (g.listen_fd < 0 || bind(g.listen_fd, (struct sockaddr *)&a, sizeof a) || listen(g.listen_fd, 64) ||
        getsockname(g.listen_fd, (struct sockaddr *)&a, &len))
        return it_error(IT_ERR_IO, "collective watchdog: cannot listen on a TCP port: %s", strerror(errno));
    me->port = a.sin_port;
    me->addr = probe_address();
    if (gethostname(me->host, sizeof me->host - 1)) snprintf(me->host, sizeof me->host, "?");
    me->host[HOST_LEN - 1] = 0;
    return IT_OK;
}

it_status it_dist_watchdog_start(it_dist *world, const char *app, double warn_s, double timeout_s) {
    if (g.peers) return it_error(IT_ERR_INVALID_ARG, "collective watchdog: already started");
    int world_n = it_dist_world(world);
    if (world_n <= 1) return IT_OK;
    watch_peer me = {0};
    it_status st = listen_on(&me);
    g.peers = calloc((size_t)world_n, sizeof *g.peers);
    if (!st && !g.peers) st = it_error(IT_ERR_OOM, "collective watchdog: out of host memory");
    /* every rank takes part in the exchange, even one that failed to listen, so none waits */
    uint8_t all_ok = st == IT_OK;
    it_status xst = it__dist_gather_host(world, &me, sizeof me, g.peers);
    if (!xst) xst = it_dist_all_reduce_host(world, &all_ok, 1, IT_DTYPE_U8, IT_CCL_MAX);
    if (!st && xst) st = xst;
    if (!st && !all_ok) st = it_error(IT_ERR_IO, "collective watchdog: another rank could not start its watchdog");
    if (!st && pipe2(g.wake, O_CLOEXEC | O_NONBLOCK))
        st = it_error(IT_ERR_IO, "collective watchdog: pipe: %s", strerror(errno));
    if (st) {
        it_dist_watchdog_stop();
        return st;
    }
    snprintf(g.app, sizeof g.app, "%s", app ? app : "infinitrain");
    g.warn_s = warn_s;
    g.timeout_s = timeout_s;
    g.rank = it_dist_rank(world);
    g.world = world_n;
    if (warn_s <= 0 && timeout_s <= 0) return IT_OK; /* the hostnames only (it_dist_host_of) */
    atomic_store(&g.stop, 0);
    atomic_store(&g.signal, 0);
    if (pthread_create(&g.responder, NULL, responder_main, NULL)) {
        it_dist_watchdog_stop();
        return it_error(IT_ERR_INTERNAL, "collective watchdog: cannot start a thread");
    }
    if (pthread_create(&g.checker, NULL, checker_main, NULL)) {
        atomic_store(&g.stop, 1);
        pthread_join(g.responder, NULL);
        it_dist_watchdog_stop();
        return it_error(IT_ERR_INTERNAL, "collective watchdog: cannot start a thread");
    }
    g.running = true;
    return IT_OK;
}

void it_dist_watchdog_stop(void) {
    if (g.running) {
        atomic_store(&g.stop, 1);
        char b = 0;
        (void)!write(g.wake[1], &b, 1);
        pthread_join(g.checker, NULL);
        pthread_join(g.responder, NULL);
        g.running = false;
    }
    if (g.listen_fd >= 0) close(g.listen_fd);
    for (int i = 0; i < 2; i++)
        if (g.wake[i] >= 0) close(g.wake[i]);
    g.listen_fd = g.wake[0] = g.wake[1] = -1;
    free(g.peers);
    g.peers = NULL;
    g.world = 0;
}
