/* What it costs to take a cache line that the other CPU wrote last: the
 * toll a virtio backend pays on every ring index, descriptor, request
 * header and status byte its frontend wrote on another CPU (and the
 * frontend on every used entry the backend wrote). docs/BENCHMARKS.md
 * quotes it.
 *
 * Ping-pong: a thread on CPU 0 and one on CPU 1 take turns incrementing one
 * counter (each waits to see the other's increment), so every increment
 * moves the line once; ns per increment = one transfer plus a few
 * instructions. Then the same with the counter and K other lines: the
 * writer fills K lines before its increment and the reader reads them
 * after seeing it, as a backend reads what a request's descriptors point
 * to; ns per line of those on the reader's side.
 *
 *   gcc -O2 -pthread -o /tmp/line-transfer docs/bench/line-transfer.c
 *   /tmp/line-transfer            # CPUs 0 and 1
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ROUNDS 2000000L
#define MAX_LINES 8

struct line {
    _Alignas(64) atomic_long v;
};

static struct line turn;
static struct line lines[MAX_LINES];
static int k_lines;
static volatile long sink;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

/* Player `me` (0 or 1) moves on turns t with t % 2 == me. */
static void play(int me) {
    for (long t = me; t < 2 * ROUNDS; t += 2) {
        while (atomic_load_explicit(&turn.v, memory_order_acquire) != t)
            ;
        long sum = 0;
        for (int i = 0; i < k_lines; i++) {
            /* Read what the other side wrote, then write for it. */
            sum += atomic_load_explicit(&lines[i].v, memory_order_relaxed);
            atomic_store_explicit(&lines[i].v, t, memory_order_relaxed);
        }
        sink = sum;
        atomic_store_explicit(&turn.v, t + 1, memory_order_release);
    }
}

static void *other(void *arg) {
    (void)arg;
    pin(0);
    play(0);
    return NULL;
}

int main(void) {
    for (int k = 0; k <= MAX_LINES; k += (k < 2 ? 1 : 2)) {
        double best = 1e18;
        for (int run = 0; run < 3; run++) {
            k_lines = k;
            atomic_store(&turn.v, 0);
            pthread_t t;
            pin(1);
            double t0 = now();
            pthread_create(&t, NULL, other, NULL);
            play(1);
            pthread_join(t, NULL);
            double ns = (now() - t0) / (2.0 * ROUNDS);
            if (ns < best)
                best = ns;
        }
        printf("lines besides the turn %d: %.0f ns per turn (best of 3)\n", k, best);
    }
    return 0;
}
