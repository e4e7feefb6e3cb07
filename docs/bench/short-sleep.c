/* What a short timed sleep costs the sleeper in CPU time: the question
 * behind the worker's spin (sleep through a gap between requests instead
 * of spinning through it only pays when the sleep costs less CPU than the
 * gap). Timer slack 1 ns, so the kernel does not round the sleep up.
 * docs/BENCHMARKS.md quotes it.
 *
 *   gcc -O2 -o /tmp/short-sleep docs/bench/short-sleep.c
 *   /tmp/short-sleep 1 2 5 10 20 50     # sleeps in us, pinned to CPU 1
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>

static double wall_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* utime + stime of this thread: what the sleeps cost the CPU it runs on,
 * the kernel's timer work included. */
static double cpu_ns(void) {
    struct rusage u;
    getrusage(RUSAGE_THREAD, &u);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e9 +
           (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e3;
}

int main(int argc, char **argv) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(1, &s);
    sched_setaffinity(0, sizeof s, &s);
    prctl(PR_SET_TIMERSLACK, 1UL);
    printf("%10s %8s %14s %13s\n", "sleep us", "sleeps", "wall us/sleep", "CPU us/sleep");
    for (int a = 1; a < argc; a++) {
        long us = atol(argv[a]);
        /* About a second of sleeping per duration. */
        long n = 1000000 / (us + 20);
        struct timespec d = {.tv_sec = 0, .tv_nsec = us * 1000};
        double w0 = wall_ns(), c0 = cpu_ns();
        for (long i = 0; i < n; i++)
            clock_nanosleep(CLOCK_MONOTONIC, 0, &d, NULL);
        double w = wall_ns() - w0, c = cpu_ns() - c0;
        printf("%10ld %8ld %14.1f %13.1f\n", us, n, w / n / 1e3, c / n / 1e3);
    }
    return 0;
}
