/* A small application for the catalog agent's tests: writes files every way the agent must
 * see (relative path, creat, openat with a directory fd, O_RDWR, several threads), opens
 * some only to read, and checks that return values and errno are those of plain libc.
 * Usage: writer DIR OUTSIDE_DIR.  Prints "ok" and exits 0 when every check held. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(const char *what) {
    fprintf(stderr, "writer: %s (errno %d)\n", what, errno);
    exit(2);
}

static void fill(int fd, size_t n, unsigned seed) {
    char buf[4096];
    while (n > 0) {
        size_t k = n < sizeof buf ? n : sizeof buf;
        for (size_t i = 0; i < k; i++) buf[i] = (char)(seed + i);
        if (write(fd, buf, k) != (ssize_t)k) fail("write");
        n -= k;
    }
}

static void *worker(void *arg) {
    long t = (long)arg;
    for (int i = 0; i < 5; i++) {
        char name[64];
        snprintf(name, sizeof name, "threads/t%ld-%d.bin", t, i);
        int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) fail("thread open");
        fill(fd, (size_t)(t * 1000 + i * 37 + 1), (unsigned)t);
        if (close(fd) != 0) fail("thread close");
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) return 1;
    if (chdir(argv[1]) != 0) fail("chdir");
    if ((mkdir("sub", 0755) != 0 && errno != EEXIST) || mkdir("threads", 0755) != 0) fail("mkdir");

    /* A relative path, O_CREAT. */
    int fd = open("rel.bin", O_WRONLY | O_CREAT | O_TRUNC, 0640);
    if (fd < 0) fail("open rel");
    fill(fd, 5000, 1);
    if (close(fd) != 0) fail("close rel");

    /* creat(), 3 MiB + 1 (spans several stripes). */
    fd = creat("sub/created.bin", 0600);
    if (fd < 0) fail("creat");
    fill(fd, 3 * 1048576 + 1, 2);
    if (close(fd) != 0) fail("close created");

    /* openat() relative to a directory fd, O_RDWR. */
    int dfd = open("sub", O_RDONLY | O_DIRECTORY);
    if (dfd < 0) fail("open dir");
    fd = openat(dfd, "at.bin", O_RDWR | O_CREAT, 0604);
    if (fd < 0) fail("openat");
    fill(fd, 70000, 3);
    if (close(fd) != 0) fail("close at");
    if (close(dfd) != 0) fail("close dir");

    /* An existing file opened to read only, and opened for writing without O_CREAT. */
    fd = open("rel.bin", O_RDONLY);
    if (fd < 0) fail("open ro");
    char b[16];
    if (read(fd, b, sizeof b) != sizeof b) fail("read");
    if (close(fd) != 0) fail("close ro");
    int ro = open("readonly.bin", O_WRONLY | O_CREAT, 0644);
    if (ro < 0 || close(ro) != 0) fail("make readonly.bin");
    fd = open("readonly.bin", O_RDONLY);
    if (fd < 0 || close(fd) != 0) fail("reopen ro");

    /* Outside the root: not recorded. */
    char outside[4096];
    snprintf(outside, sizeof outside, "%s/outside.bin", argv[2]);
    fd = open(outside, O_WRONLY | O_CREAT, 0644);
    if (fd < 0) fail("open outside");
    fill(fd, 10, 4);
    if (close(fd) != 0) fail("close outside");

    /* errno and return values are libc's. */
    errno = 0;
    if (open("missing/x", O_RDONLY) != -1 || errno != ENOENT) fail("ENOENT expected");
    errno = 0;
    if (open("missing/y", O_WRONLY | O_CREAT, 0644) != -1 || errno != ENOENT) fail("ENOENT (create) expected");
    errno = 0;
    if (close(-1) != -1 || errno != EBADF) fail("EBADF expected");
    fd = open("twice.bin", O_WRONLY | O_CREAT, 0644);
    if (fd < 0 || close(fd) != 0) fail("twice");
    errno = 0;
    if (close(fd) != -1 || errno != EBADF) fail("second close EBADF expected");
    errno = 1234;
    fd = open("errno.bin", O_WRONLY | O_CREAT, 0644);
    if (fd < 0 || errno != 1234) fail("a successful open changed errno");
    errno = 4321;
    if (close(fd) != 0 || errno != 4321) fail("a successful close changed errno");

    /* Several threads at once. */
    pthread_t th[4];
    for (long t = 0; t < 4; t++)
        if (pthread_create(&th[t], NULL, worker, (void *)t) != 0) fail("pthread_create");
    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);

    /* Left open at exit: recorded by the agent's exit hook. */
    fd = open("left-open.bin", O_WRONLY | O_CREAT, 0644);
    if (fd < 0) fail("left open");
    fill(fd, 123, 5);

    puts("ok");
    return 0;
}
