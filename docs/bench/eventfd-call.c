/* What a call (a write to the frontend's call eventfd) costs the writer:
 * with nobody waiting, and with a reader asleep on another CPU, which the
 * write must wake (the case of a frontend that went to sleep waiting for
 * completions); and what each such sleep and wake-up costs the reader's own
 * CPU time (the price a thread pays for sleeping instead of spinning: it
 * depends on the machine's idle path, e.g. a guest's
 * /sys/module/haltpoll/parameters/guest_halt_poll_ns). docs/BENCHMARKS.md
 * quotes it.
 *
 *   gcc -O2 -pthread -o /tmp/eventfd-call docs/bench/eventfd-call.c
 *   /tmp/eventfd-call 50    # writer on CPU 1, reader on CPU 0 asleep 50 us
 *   /tmp/eventfd-call 5     # ... asleep about 5 us
 *   /tmp/eventfd-call rtt 2 # round trips: a driver on CPU 0 posts a request
 *                           # and waits in poll(); a device thread spinning
 *                           # on CPU 1 works 2 us on it, then calls (the
 *                           # shape of QD1 against a spinning server)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

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

/* Busy for `ns`, as a thread at work (or spinning) would be. */
static void spin_for(double ns) {
    double until = now() + ns;
    while (now() < until)
        ;
}

static int wake_fd;
static volatile uint64_t woken;

static void *reader(void *arg) {
    (void)arg;
    pin(0);
    uint64_t v;
    for (;;) {
        if (read(wake_fd, &v, 8) == 8)
            woken += v;
    }
    return NULL;
}

static volatile uint64_t posted;
static int call_fd;
static double work_ns;

static void *device(void *arg) {
    (void)arg;
    pin(1);
    uint64_t seen = 0, one = 1;
    for (;;) {
        while (posted == seen)
            ;
        seen = posted;
        spin_for(work_ns);
        if (write(call_fd, &one, 8) != 8)
            return NULL;
    }
}

/* The driver's side of QD1: each round trip it posts and waits in poll() for
 * the call, as a frontend waits on its call eventfd. */
static int round_trips(double work_us) {
    const int n = 200000;
    pin(0);
    call_fd = eventfd(0, EFD_NONBLOCK);
    work_ns = work_us * 1000;
    pthread_t t;
    pthread_create(&t, NULL, device, NULL);
    usleep(10000);
    struct pollfd p = {.fd = call_fd, .events = POLLIN};
    struct rusage r0, r1;
    uint64_t v;
    getrusage(RUSAGE_THREAD, &r0);
    double a = now();
    for (int i = 0; i < n; i++) {
        posted++;
        while (read(call_fd, &v, 8) != 8)
            poll(&p, 1, -1);
    }
    double rtt = (now() - a) / n;
    getrusage(RUSAGE_THREAD, &r1);
    printf("work %.1f us: round trip %5.1f us (%5.1f us beyond the work), %.2f sleeps per "
           "round trip\n",
           work_us, rtt / 1000, rtt / 1000 - work_us, (double)(r1.ru_nvcsw - r0.ru_nvcsw) / n);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && argv[1][0] == 'r')
        return round_trips(argc > 2 ? atof(argv[2]) : 2);
    double gap_ns = (argc > 1 ? atof(argv[1]) : 50) * 1000;
    pin(1);
    uint64_t one = 1, v;
    const int n = 2000000, m = 20000;
    /* Nobody waits: the eventfd's counter is drained now and then. */
    int fd = eventfd(0, EFD_NONBLOCK);
    double a = now();
    for (int i = 0; i < n; i++) {
        if (write(fd, &one, 8) != 8)
            return 1;
        if ((i & 1023) == 0 && read(fd, &v, 8) != 8)
            return 1;
    }
    printf("no waiter:        %6.0f ns per write\n", (now() - a) / n);
    /* A reader blocked in read() on CPU 0: each write wakes it; the writer
     * then waits `gap` for the reader to go back to sleep. */
    wake_fd = eventfd(0, 0);
    pthread_t t;
    pthread_create(&t, NULL, reader, NULL);
    usleep(10000);
    clockid_t reader_clock;
    pthread_getcpuclockid(t, &reader_clock);
    struct timespec c0, c1;
    clock_gettime(reader_clock, &c0);
    double in_write = 0;
    for (int i = 0; i < m; i++) {
        double w = now();
        if (write(wake_fd, &one, 8) != 8)
            return 1;
        in_write += now() - w;
        spin_for(gap_ns);
    }
    clock_gettime(reader_clock, &c1);
    double reader_ns = (c1.tv_sec - c0.tv_sec) * 1e9 + (c1.tv_nsec - c0.tv_nsec);
    printf("sleeping reader:  %6.0f ns per write, %.0f us apart (%llu wake-ups seen)\n",
           in_write / m, gap_ns / 1000, (unsigned long long)woken);
    printf("the reader's CPU: %6.0f ns per sleep and wake-up\n", reader_ns / m);
    return 0;
}
