/* A host for the shared-directory tests: it tells its pid first, so that the test can plant
 * names for it in the catalog directory before the agent writes there.
 * Usage: shared_writer DIR N
 *   prints "pid <pid>", waits for a line on stdin, writes a-0..a-(N-1) (each closed), prints
 *   "half", waits for a line, writes b-0..b-(N-1), then prints "ok lost=L refused=R", L and R
 *   read from the agent's counters (`none` without the agent).
 * File i of a series holds i + 1 bytes; errno is checked to be kept across close. Exits 2 on
 * any failure. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *dir;
static int n;

static void fail(const char *what) {
    fprintf(stderr, "shared_writer: %s (errno %d)\n", what, errno);
    exit(2);
}

static void wait_line(void) {
    char line[64];
    if (!fgets(line, sizeof line, stdin)) fail("stdin");
}

static void series(const char *prefix) {
    char path[4096], buf[4096];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s-%d", dir, prefix, i);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) fail("open");
        size_t len = (size_t)i + 1 < sizeof buf ? (size_t)i + 1 : sizeof buf;
        memset(buf, 'x', len);
        if (write(fd, buf, len) != (ssize_t)len) fail("write");
        errno = EDOM;
        if (close(fd) != 0 || errno != EDOM) fail("close");
    }
}

static void counter(const char *name) {
    const uint64_t *c = dlsym(RTLD_DEFAULT, name);
    if (c)
        printf("%llu", (unsigned long long)*c);
    else
        printf("none");
}

int main(int argc, char **argv) {
    if (argc != 3) return 1;
    dir = argv[1];
    n = atoi(argv[2]);
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    wait_line();
    series("a");
    printf("half\n");
    fflush(stdout);
    wait_line();
    series("b");
    printf("ok lost=");
    counter("icicle_catalog_agent_lost");
    printf(" refused=");
    counter("icicle_catalog_agent_refused");
    printf("\n");
    return 0;
}
