/*
 * spawn_floor: how fast this machine can start and reap processes at all.
 *
 * posix_spawn + waitpid of /bin/true, N times, first with 1 child in flight (spawn, wait,
 * repeat), then with 2 in flight (wait for any, start the next). Prints one JSON line:
 *   {"bench": "spawn_floor", "n": N, "tasks_per_s_1": ..., "tasks_per_s_2": ...}
 * No file actions or attributes: this is the floor the pilotfish Executor is compared with.
 *
 * Build: make            (or: cc -O2 -Wall -o spawn_floor spawn_floor.c)
 * Run:   ./spawn_floor [N]      (default N = 5000)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void start(void)
{
    static char *const argv[] = {"/bin/true", NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], NULL, NULL, argv, environ);
    if (rc != 0) {
        fprintf(stderr, "posix_spawn: %s\n", strerror(rc));
        exit(1);
    }
}

static void reap_one(void)
{
    int status;
    while (waitpid(-1, &status, 0) < 0) {
        if (errno != EINTR) {
            perror("waitpid");
            exit(1);
        }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "child failed: status %d\n", status);
        exit(1);
    }
}

/* Runs n tasks keeping `inflight` children alive; returns tasks per second. */
static double run(long n, int inflight)
{
    double t0 = now();
    long started = 0, done = 0;
    while (started < n && started < inflight) {
        start();
        started++;
    }
    while (done < n) {
        reap_one();
        done++;
        if (started < n) {
            start();
            started++;
        }
    }
    return n / (now() - t0);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 5000;
    if (n <= 0) {
        fprintf(stderr, "usage: %s [N > 0]\n", argv[0]);
        return 2;
    }
    run(n / 10 + 1, 1); /* warm up: page cache, dynamic loader */
    double one = run(n, 1);
    double two = run(n, 2);
    printf("{\"bench\": \"spawn_floor\", \"n\": %ld, \"tasks_per_s_1\": %.0f, \"tasks_per_s_2\": %.0f}\n",
           n, one, two);
    return 0;
}
