/* Writes files the ways the agent sees only through its stdio, fortified-openat and mkstemp
 * hooks. Built with -O2 -D_FORTIFY_SOURCE=2 (so a three-argument openat with flags that are
 * not a constant becomes __openat_2). Usage: stdio_writer DIR stdio|fortify|mkstemp.
 * The test creates DIR/append.txt ("old\n"), DIR/input.txt, DIR/fort.bin and DIR/fort64.bin
 * beforehand. Prints "ok" and exits 0 when every check held. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fail(const char *what) {
    fprintf(stderr, "stdio_writer: %s (errno %d)\n", what, errno);
    exit(2);
}

static void fill(int fd, size_t n) {
    char buf[1000];
    memset(buf, 'x', sizeof buf);
    while (n > 0) {
        size_t k = n < sizeof buf ? n : sizeof buf;
        if (write(fd, buf, k) != (ssize_t)k) fail("write");
        n -= k;
    }
}

/* Under the agent (CATALOG_DIR set): whether this process's catalog already has an entry for
 * DIR/name, i.e. the file was recorded when it was closed, not later. */
static int recorded(const char *name) {
    const char *dir = getenv("CATALOG_DIR");
    if (!dir) return 1;
    char host[256] = {0}, path[4096], line[4096], want[512];
    if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "localhost");
    snprintf(path, sizeof path, "%s/catalog.%s.%d.txt", dir, host, (int)getpid());
    snprintf(want, sizeof want, "/%s\n", name);
    FILE *f = fopen(path, "r");
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) {
        size_t n = strlen(line), k = strlen(want);
        found = n >= k && strcmp(line + n - k, want) == 0;
    }
    if (f) fclose(f);
    return found;
}

static void stdio_case(void) {
    /* fopen "w", fwrite in pieces; the last 10007 % 4096 bytes are still buffered at fclose. */
    FILE *f = fopen("stdio.bin", "w");
    if (!f) fail("fopen stdio.bin");
    char buf[1000];
    memset(buf, 'a', sizeof buf);
    for (int i = 0; i < 10; i++)
        if (fwrite(buf, 1, sizeof buf, f) != sizeof buf) fail("fwrite");
    if (fprintf(f, "%s", "tail!\n\n") != 7) fail("fprintf");
    errno = 4321;
    if (fclose(f) != 0 || errno != 4321) fail("fclose stdio.bin (or it changed errno)");
    if (!recorded("stdio.bin")) fail("stdio.bin not recorded at its fclose");

    /* fopen "a" onto an existing file. */
    f = fopen("append.txt", "a");
    if (!f || fputs("appended\n", f) < 0 || fclose(f) != 0) fail("append");

    /* Read-only opens: never recorded (input.txt), no second entry (stdio.bin). */
    f = fopen("input.txt", "r");
    if (!f || fread(buf, 1, 5, f) != 5 || fclose(f) != 0) fail("read input.txt");
    f = fopen("stdio.bin", "r");
    if (!f || fread(buf, 1, sizeof buf, f) != sizeof buf || fclose(f) != 0) fail("read stdio.bin");

    /* freopen: the first file is finished, the second written through the same FILE. */
    f = fopen("first.txt", "w");
    if (!f || fputs("1234", f) < 0) fail("first.txt");
    f = freopen("second.txt", "w", f);
    if (!f || !recorded("first.txt")) fail("freopen second.txt (or first.txt not recorded then)");
    if (fputs("abcdefgh", f) < 0 || fclose(f) != 0) fail("second.txt");

    /* fopen64 with "w+" (written, then read back). */
    f = fopen64("plus64.txt", "w+");
    if (!f || fputs("xyz", f) < 0) fail("fopen64");
    rewind(f);
    if (fread(buf, 1, 3, f) != 3 || memcmp(buf, "xyz", 3) != 0 || fclose(f) != 0) fail("plus64.txt");

    /* open + fdopen: the FILE's fclose closes the tracked descriptor. */
    int fd = open("fdopen.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    f = fd < 0 ? NULL : fdopen(fd, "w");
    if (!f || fputs("via fdopen\n", f) < 0 || fclose(f) != 0 || !recorded("fdopen.txt")) fail("fdopen.txt");

    /* Return values and errno of failures are libc's. */
    errno = 0;
    if (fopen("missing/x", "w") != NULL || errno != ENOENT) fail("ENOENT expected");
    errno = 0;
    if (fopen("missing/y", "r") != NULL || errno != ENOENT) fail("ENOENT (read) expected");

    /* Left open, all of it still in the buffer: exit must flush it before it is recorded. */
    f = fopen("left-open.txt", "w");
    if (!f || fputs("still buffered\n", f) < 0) fail("left-open.txt");
}

static void fortify_case(void) {
    /* Not a constant, so the fortified openat calls __openat_2 (no mode: no O_CREAT). */
    volatile int vflags = O_WRONLY | O_TRUNC;
    int flags = vflags;
    int dfd = open(".", O_RDONLY | O_DIRECTORY);
    if (dfd < 0) fail("open .");
    int fd = openat(dfd, "fort.bin", flags);
    if (fd < 0) fail("openat fort.bin");
    fill(fd, 777);
    if (close(fd) != 0) fail("close fort.bin");
    fd = openat64(dfd, "fort64.bin", flags);
    if (fd < 0) fail("openat64 fort64.bin");
    fill(fd, 1234);
    if (close(fd) != 0) fail("close fort64.bin");
    /* Read-only: not recorded. */
    vflags = O_RDONLY;
    flags = vflags;
    fd = openat(dfd, "input.txt", flags);
    if (fd < 0 || close(fd) != 0) fail("openat input.txt");
    errno = 0;
    if (openat(dfd, "missing/z", flags) != -1 || errno != ENOENT) fail("ENOENT expected");
    if (close(dfd) != 0) fail("close .");
}

static void mkstemp_case(void) {
    char t1[] = "tmp-XXXXXX", t2[] = "tmpo-XXXXXX", t3[] = "tmps-XXXXXX.dat", t4[] = "tmpos-XXXXXX.dat", t5[] = "tmp64-XXXXXX";
    int fds[5];
    fds[0] = mkstemp(t1);
    fds[1] = mkostemp(t2, O_CLOEXEC);
    fds[2] = mkstemps(t3, 4);
    fds[3] = mkostemps(t4, 4, O_APPEND);
    fds[4] = mkstemp64(t5);
    for (int i = 0; i < 5; i++) {
        if (fds[i] < 0) fail("mkstemp family");
        fill(fds[i], (size_t)(i + 1) * 100);
        if (close(fds[i]) != 0) fail("close mkstemp file");
    }
    errno = 0;
    char bad[] = "missing/tmp-XXXXXX";
    if (mkstemp(bad) != -1 || errno != ENOENT) fail("ENOENT expected");
}

int main(int argc, char **argv) {
    if (argc != 3) return 1;
    if (chdir(argv[1]) != 0) fail("chdir");
    if (strcmp(argv[2], "stdio") == 0) stdio_case();
    else if (strcmp(argv[2], "fortify") == 0) fortify_case();
    else if (strcmp(argv[2], "mkstemp") == 0) mkstemp_case();
    else return 1;
    puts("ok");
    return 0;
}
