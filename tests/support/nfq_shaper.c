/* nfq_shaper: a link shaper for the tests' network-namespace cluster where the kernel has no
 * tc netem (scripts/netns-cluster.sh delay): holds every packet the netfilter queue hands it for
 * a fixed delay, then accepts it, or drops it with a given probability. Built for tests only.
 *
 *   nfq_shaper QUEUE DELAY_MS LOSS_PERCENT
 *
 * Run inside the host's namespace, with iptables sending that host's INPUT and OUTPUT packets to
 * queue QUEUE (`-j NFQUEUE --queue-num QUEUE --queue-bypass`: packets pass when it is not
 * running). Every packet is held equally long, so the order is kept, as netem's delay keeps it.
 * Exits on SIGTERM. */
#include <arpa/inet.h>
#include <errno.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

typedef struct held {
    uint32_t id;
    double due; /* seconds, CLOCK_MONOTONIC */
    int verdict;
} held;

static held *ring;
static size_t cap, head, count;
static double delay_s, loss;
static volatile sig_atomic_t stop;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double uniform(void) { /* xorshift64*: the loss draw */
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (double)((rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa, void *data) {
    (void)msg, (void)data;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    if (!ph) return 0;
    uint32_t id = ntohl(ph->packet_id);
    int verdict = loss > 0 && uniform() * 100.0 < loss ? NF_DROP : NF_ACCEPT;
    if (count == cap) { /* full: this one passes now (the queue never stalls the link) */
        nfq_set_verdict(qh, id, verdict, 0, NULL);
        return 0;
    }
    ring[(head + count++) % cap] = (held){id, now() + delay_s, verdict};
    return 0;
}

static void on_term(int sig) {
    (void)sig;
    stop = 1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: nfq_shaper QUEUE DELAY_MS LOSS_PERCENT\n");
        return 2;
    }
    int queue = atoi(argv[1]);
    delay_s = atof(argv[2]) / 1000.0;
    loss = atof(argv[3]);
    cap = 1 << 16;
    ring = malloc(cap * sizeof *ring);
    struct nfq_handle *h = nfq_open();
    struct nfq_q_handle *qh = h ? nfq_create_queue(h, (uint16_t)queue, on_packet, NULL) : NULL;
    if (!ring || !qh || nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0) {
        fprintf(stderr, "nfq_shaper: cannot bind netfilter queue %d: %s\n", queue, strerror(errno));
        return 1;
    }
    nfq_set_queue_maxlen(qh, (uint32_t)cap);
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    int fd = nfq_fd(h);
    char buf[65536];
    while (!stop) {
        double t = now();
        while (count && ring[head].due <= t) { /* release what is due, oldest first */
            nfq_set_verdict(qh, ring[head].id, ring[head].verdict, 0, NULL);
            head = (head + 1) % cap, count--;
        }
        int wait_ms = count ? (int)((ring[head].due - t) * 1000.0) + 1 : 100;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, wait_ms) > 0) {
            ssize_t n = recv(fd, buf, sizeof buf, 0);
            if (n > 0) nfq_handle_packet(h, buf, (int)n);
        }
    }
    while (count) { /* let the held packets go */
        nfq_set_verdict(qh, ring[head].id, ring[head].verdict, 0, NULL);
        head = (head + 1) % cap, count--;
    }
    nfq_destroy_queue(qh);
    nfq_close(h);
    free(ring);
    return 0;
}
