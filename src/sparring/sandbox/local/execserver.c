/*
 * Sparring's exec server in C: the same protocol as execserver.py (read that
 * file's docstring first), built once per backend with the host's C compiler
 * and used when one is available. It starts in about a millisecond instead of
 * the ~10 ms an interpreter takes, which is most of a sandbox's create time.
 *
 * PID 1 of the sandbox. Frames: <type:u8><id:u32 LE><length:u32 LE><payload>.
 *
 * Nothing a command gets is inherited from PID 1's current state: each command's supervisor sets
 * every rlimit, the nice value, the scheduling policy, the I/O priority and the CPU affinity to what
 * PID 1 had when it started (then the request's rlimits on top), and default signal dispositions,
 * before it execs; where that fails the command does not run (exit 126). See born_state().
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <grp.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { T_EXEC = 1, T_STDIN = 2, T_STDIN_EOF = 3, T_KILL = 4, T_KILLALL = 5, T_PING = 6 };
enum { T_READY = 10, T_OUT = 11, T_ERR = 12, T_EXIT = 13, T_ACK = 14 };
enum { W_OUT = 1, W_ERR = 2, W_PID = 3, W_IN = 4, W_LISTEN = 5 };
#define CHUNK 65536
#define HDR 9

struct job;
struct watch { int kind; struct job *job; };
struct job {
    uint32_t id;
    pid_t pid;
    int pidfd, fd[2], in_fd;
    char *in_buf; size_t in_len, in_off; int in_eof, in_waiting;
    size_t cap, sent[2];
    unsigned long long dropped[2];
    int killed;
    struct watch w[4];
    struct job *next;
};

static int ep;
static struct job *jobs;

/* PID 1's process state at start, before any command ran: what every command starts from. */
static struct {
    struct rlimit lim[RLIM_NLIMITS];
    int nice, policy, ioprio, have_affinity;
    struct sched_param param;
    cpu_set_t affinity;
} born;

static void born_state(void) {
    for (int r = 0; r < RLIM_NLIMITS; r++) getrlimit(r, &born.lim[r]);
    errno = 0;
    born.nice = getpriority(PRIO_PROCESS, 0);
    born.policy = sched_getscheduler(0);
    sched_getparam(0, &born.param);
    born.ioprio = (int)syscall(SYS_ioprio_get, 1 /* IOPRIO_WHO_PROCESS */, 0);
    born.have_affinity = sched_getaffinity(0, sizeof born.affinity, &born.affinity) == 0;
}

/* In a command's supervisor: PID 1's birth state, so nothing done to PID 1 since reaches a command. */
static const char *reset_state(void) {
    for (int r = 0; r < RLIM_NLIMITS; r++) if (setrlimit(r, &born.lim[r])) return "rlimits";
    if (setpriority(PRIO_PROCESS, 0, born.nice)) return "nice value";
    if (born.policy >= 0 && sched_setscheduler(0, born.policy, &born.param)) return "scheduling policy";
    if (born.ioprio >= 0 && syscall(SYS_ioprio_set, 1, 0, born.ioprio)) return "I/O priority";
    if (born.have_affinity && sched_setaffinity(0, sizeof born.affinity, &born.affinity)) return "CPU affinity";
    for (int sig = 1; sig < NSIG; sig++) if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL);
    return NULL;
}
static char *inbuf; static size_t in_len, in_cap;

static void die(const char *m) { dprintf(2, "sparring exec server: %s: %s\n", m, strerror(errno)); _exit(70); }

static void write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0) { if (errno == EINTR) continue; _exit(0); } /* the host is gone */
        p += k; n -= (size_t)k;
    }
}

static void send_frame(int t, uint32_t id, const char *payload, uint32_t n) {
    char h[HDR];
    h[0] = (char)t;
    memcpy(h + 1, &id, 4);
    memcpy(h + 5, &n, 4);
    if (n <= 4096) {
        char buf[HDR + 4096];
        memcpy(buf, h, HDR);
        if (n) memcpy(buf + HDR, payload, n);
        write_all(1, buf, HDR + n);
    } else {
        write_all(1, h, HDR);
        write_all(1, payload, n);
    }
}

static struct job *find_id(uint32_t id) { for (struct job *j = jobs; j; j = j->next) if (j->id == id) return j; return NULL; }
static struct job *find_pid(pid_t p) { for (struct job *j = jobs; j; j = j->next) if (j->pid == p) return j; return NULL; }
static int job_live(const struct job *x) { for (struct job *j = jobs; j; j = j->next) if (j == x) return 1; return 0; }

/* ---------- process tree ---------- */
static char state_of(pid_t pid, pid_t *ppid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *r = strrchr(buf, ')');
    if (!r || r[1] == 0) return 0;
    if (ppid) *ppid = (pid_t)strtol(r + 4, NULL, 10);
    return r[2];
}

static int list_procs(pid_t *pids, pid_t *ppids, int max) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        pid_t p = (pid_t)atoi(e->d_name), pp = 0;
        char s = state_of(p, &pp);
        if (!s) continue;
        pids[n] = p; ppids[n] = pp; n++;
    }
    closedir(d);
    return n;
}

#define MAXP 65536
static pid_t P[MAXP], PP[MAXP], seen[MAXP];

static int in_set(pid_t *s, int n, pid_t p) { for (int i = 0; i < n; i++) if (s[i] == p) return 1; return 0; }

static void wait_dead(pid_t *s, int n) {
    for (int t = 0; t < 2000; t++) {
        int left = 0;
        for (int i = 0; i < n; i++) { char c = state_of(s[i], NULL); if (c && c != 'Z' && c != 'X') left++; }
        if (!left) return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* Stop every descendant of root until none is left running (so none can fork away), then kill them. */
static void kill_tree(pid_t root) {
    int ns = 0;
    for (int round = 0; round < 200; round++) {
        int n = list_procs(P, PP, MAXP), added = 0;
        /* descendants: repeat passes until the set stops growing */
        int grew = 1;
        while (grew) {
            grew = 0;
            for (int i = 0; i < n; i++) {
                if ((PP[i] == root || in_set(seen, ns, PP[i])) && !in_set(seen, ns, P[i]) && ns < MAXP) {
                    seen[ns++] = P[i];
                    kill(P[i], SIGSTOP);
                    grew = 1; added++;
                }
            }
        }
        if (!added) break;
    }
    for (int i = 0; i < ns; i++) kill(seen[i], SIGKILL);
    wait_dead(seen, ns);
    kill(root, SIGKILL);
}

static void kill_all(void) {
    pid_t me = getpid();
    for (int round = 0; round < 200; round++) {
        int n = list_procs(P, PP, MAXP), live = 0;
        for (int i = 0; i < n; i++) {
            if (P[i] == me) continue;
            char c = state_of(P[i], NULL);
            if (c && c != 'Z' && c != 'X') seen[live++] = P[i];
        }
        if (!live) return;
        for (int i = 0; i < live; i++) kill(seen[i], SIGSTOP);
        for (int i = 0; i < live; i++) kill(seen[i], SIGKILL);
        wait_dead(seen, live);
    }
}

/* ---------- commands ---------- */
static const char *which(const char *cmd, const char *path, char *out, size_t outn) {
    struct stat st;
    if (strchr(cmd, '/')) {
        if (access(cmd, X_OK) == 0 && stat(cmd, &st) == 0 && !S_ISDIR(st.st_mode)) return cmd;
        return NULL;
    }
    const char *p = path;
    while (p) {
        const char *c = strchr(p, ':');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        snprintf(out, outn, "%.*s/%s", (int)(len ? len : 1), len ? p : ".", cmd);
        if (access(out, X_OK) == 0 && stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) return out;
        p = c ? c + 1 : NULL;
    }
    return NULL;
}

static int rlimit_of(const char *name) {
    if (!strcmp(name, "nofile")) return RLIMIT_NOFILE;
    if (!strcmp(name, "as")) return RLIMIT_AS;
    if (!strcmp(name, "nproc")) return RLIMIT_NPROC;
    if (!strcmp(name, "core")) return RLIMIT_CORE;
    if (!strcmp(name, "fsize")) return RLIMIT_FSIZE;
    return -1;
}

static void supervise(char **argv, char **envp, const char *cwd, char *limits, int in_r, int out_w, int err_w) {
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    setsid();
    dup2(in_r, 0); dup2(out_w, 1); dup2(err_w, 2);
    syscall(SYS_close_range, 3U, ~0U, 0U);
    const char *bad = reset_state();
    if (bad) { dprintf(2, "sparring: cannot reset the command's %s: %s\n", bad, strerror(errno)); _exit(126); }
    for (char *tok = strtok(limits, ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = 0;
        int r = rlimit_of(tok);
        if (r < 0) continue;
        rlim_t v = (rlim_t)strtoull(eq + 1, NULL, 10);
        struct rlimit cur;
        if (getrlimit(r, &cur) == 0 && cur.rlim_max != RLIM_INFINITY && v > cur.rlim_max) v = cur.rlim_max;
        struct rlimit rl = { v, v };  /* never above the hard limit the sandbox was started with */
        if (setrlimit(r, &rl)) { dprintf(2, "sparring: cannot set rlimit %s: %s\n", tok, strerror(errno)); _exit(126); }
    }
    if (chdir(cwd) != 0) { dprintf(2, "sparring: cannot enter %s: %s\n", cwd, strerror(errno)); _exit(126); }
    const char *path = "/usr/bin:/bin";
    for (char **e = envp; *e; e++) if (!strncmp(*e, "PATH=", 5)) path = *e + 5;
    char buf[4096];
    const char *exe = argv[0] ? which(argv[0], path, buf, sizeof buf) : NULL;
    if (!exe) { dprintf(2, "sparring: command not found in sandbox: %s\n", argv[0] ? argv[0] : ""); _exit(127); }
    pid_t child = fork();
    if (child < 0) { dprintf(2, "sparring: cannot start command: %s\n", strerror(errno)); _exit(126); }
    if (child == 0) {
        execve(exe, argv, envp);
        dprintf(2, "sparring: cannot start command: %s: %s\n", exe, strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    int st;
    for (;;) {
        pid_t p = waitpid(-1, &st, 0);
        if (p < 0) { if (errno == EINTR) continue; _exit(126); }
        if (p == child) {
            if (WIFEXITED(st)) _exit(WEXITSTATUS(st));
            _exit(128 + WTERMSIG(st));
        }
    }
}

static void watch_fd(int fd, uint32_t events, struct watch *w) {
    struct epoll_event ev = { .events = events, .data.ptr = w };
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

static void close_fd(int *fd) {
    if (*fd >= 0) { epoll_ctl(ep, EPOLL_CTL_DEL, *fd, NULL); close(*fd); *fd = -1; }
}

static void start(uint32_t id, char *payload, uint32_t n) {
    /* split the NUL-separated fields */
    char **f = calloc((size_t)n + 2, sizeof *f);
    size_t nf = 0;
    char *p = payload, *end = payload + n;
    f[nf++] = p;
    for (char *q = p; q < end; q++) if (*q == 0) f[nf++] = q + 1;
    if (nf < 5) { free(f); send_frame(T_EXIT, id, "126 0 0 e", 9); return; }
    const char *cwd = f[0];
    size_t cap = strtoull(f[1], NULL, 10);
    char *limits = f[2];
    int has_stdin = f[3][0] == '1';
    size_t argc = strtoull(f[4], NULL, 10);
    if (5 + argc > nf) argc = nf - 5;
    char **argv = calloc(argc + 1, sizeof *argv);
    for (size_t i = 0; i < argc; i++) argv[i] = f[5 + i];
    size_t nenv = nf - 5 - argc;
    char **envp = calloc(nenv + 1, sizeof *envp);
    size_t ne = 0;
    for (size_t i = 0; i < nenv; i++) if (strchr(f[5 + argc + i], '=')) envp[ne++] = f[5 + argc + i];

    int o[2], e[2], in[2] = { -1, -1 };
    if (pipe2(o, O_CLOEXEC) || pipe2(e, O_CLOEXEC) || (has_stdin ? pipe2(in, O_CLOEXEC) : 0)) {
        char msg[128];
        int k = snprintf(msg, sizeof msg, "sparring: cannot start command: %s\n", strerror(errno));
        send_frame(T_ERR, id, msg, (uint32_t)k);
        send_frame(T_EXIT, id, "126 0 0 e", 9);
        free(f); free(argv); free(envp);
        return;
    }
    if (!has_stdin) { in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC); in[1] = -1; }
    pid_t pid = fork();
    if (pid == 0) supervise(argv, envp, cwd, limits, in[0], o[1], e[1]);
    close(o[1]); close(e[1]); close(in[0]);
    free(f); free(argv); free(envp);
    if (pid < 0) {
        char msg[128];
        int k = snprintf(msg, sizeof msg, "sparring: cannot start command: %s\n", strerror(errno));
        close(o[0]); close(e[0]); if (in[1] >= 0) close(in[1]);
        send_frame(T_ERR, id, msg, (uint32_t)k);
        send_frame(T_EXIT, id, "126 0 0 e", 9);
        return;
    }
    struct job *j = calloc(1, sizeof *j);
    j->id = id; j->pid = pid; j->cap = cap;
    j->fd[0] = o[0]; j->fd[1] = e[0]; j->in_fd = in[1];
    for (int k = 0; k < 4; k++) j->w[k].job = j;
    j->w[0].kind = W_OUT; j->w[1].kind = W_ERR; j->w[2].kind = W_PID; j->w[3].kind = W_IN;
    fcntl(o[0], F_SETFL, O_NONBLOCK); fcntl(e[0], F_SETFL, O_NONBLOCK);
    watch_fd(o[0], EPOLLIN, &j->w[0]);
    watch_fd(e[0], EPOLLIN, &j->w[1]);
    j->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (j->pidfd >= 0) watch_fd(j->pidfd, EPOLLIN, &j->w[2]);
    if (j->in_fd >= 0) fcntl(j->in_fd, F_SETFL, O_NONBLOCK);
    j->next = jobs; jobs = j;
}

static void read_out(struct job *j, int k) {
    static char buf[CHUNK];
    int t = k == 0 ? T_OUT : T_ERR;
    for (;;) {
        if (j->fd[k] < 0) return;
        ssize_t n = read(j->fd[k], buf, sizeof buf);
        if (n < 0) { if (errno == EINTR) continue; return; }
        if (n == 0) { close_fd(&j->fd[k]); return; }
        size_t room = j->cap > j->sent[k] ? j->cap - j->sent[k] : 0;
        size_t keep = (size_t)n < room ? (size_t)n : room;
        if (keep) { send_frame(t, j->id, buf, (uint32_t)keep); j->sent[k] += keep; }
        j->dropped[k] += (unsigned long long)((size_t)n - keep);
    }
}

static void pump_stdin(struct job *j) {
    if (j->in_fd < 0) return;
    while (j->in_off < j->in_len) {
        ssize_t n = write(j->in_fd, j->in_buf + j->in_off, j->in_len - j->in_off);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) break;
            j->in_off = j->in_len; j->in_eof = 1; break; /* the command closed its stdin */
        }
        j->in_off += (size_t)n;
    }
    if (j->in_off < j->in_len) {
        if (!j->in_waiting) { watch_fd(j->in_fd, EPOLLOUT, &j->w[3]); j->in_waiting = 1; }
        return;
    }
    if (j->in_waiting) { epoll_ctl(ep, EPOLL_CTL_DEL, j->in_fd, NULL); j->in_waiting = 0; }
    if (j->in_eof) close_fd(&j->in_fd);
}

static void feed_stdin(struct job *j, const char *data, uint32_t n, int eof) {
    if (n) {
        j->in_buf = realloc(j->in_buf, j->in_len + n);
        memcpy(j->in_buf + j->in_len, data, n);
        j->in_len += n;
    }
    if (eof) j->in_eof = 1;
    pump_stdin(j);
}

static void finish(struct job *j, int st) {
    for (int k = 0; k < 2; k++) { read_out(j, k); close_fd(&j->fd[k]); }
    close_fd(&j->in_fd);
    close_fd(&j->pidfd);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char msg[96];
    int k = snprintf(msg, sizeof msg, "%d %llu %llu %s", code, j->dropped[0], j->dropped[1], j->killed ? "k" : "-");
    send_frame(T_EXIT, j->id, msg, (uint32_t)k);
    for (struct job **pp = &jobs; *pp; pp = &(*pp)->next) if (*pp == j) { *pp = j->next; break; }
    free(j->in_buf);
    free(j);
}

static void reap(void) {
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
        struct job *j = find_pid(p);
        if (j) finish(j, st);
    }
}

static void dispatch(int t, uint32_t id, char *payload, uint32_t n) {
    struct job *j;
    switch (t) {
    case T_EXEC: start(id, payload, n); break;
    case T_STDIN: case T_STDIN_EOF: if ((j = find_id(id))) feed_stdin(j, payload, n, t == T_STDIN_EOF); break;
    case T_KILL: if ((j = find_id(id))) { j->killed = 1; kill_tree(j->pid); } break;
    case T_KILLALL:
        for (j = jobs; j; j = j->next) j->killed = 1;
        kill_all();
        reap();
        send_frame(T_ACK, id, NULL, 0);
        break;
    case T_PING: send_frame(T_ACK, id, NULL, 0); break;
    }
}

static int on_input(void) {
    if (in_cap - in_len < CHUNK) { in_cap = in_cap * 2 + CHUNK; inbuf = realloc(inbuf, in_cap); }
    ssize_t n = read(0, inbuf + in_len, in_cap - in_len);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    if (n == 0) return 0;
    in_len += (size_t)n;
    size_t pos = 0;
    while (in_len - pos >= HDR) {
        uint32_t id, len;
        memcpy(&id, inbuf + pos + 1, 4);
        memcpy(&len, inbuf + pos + 5, 4);
        if (in_len - pos - HDR < len) break;
        int t = (unsigned char)inbuf[pos];
        /* payloads are NUL-terminated in place for the parser: copy out */
        char *payload = malloc((size_t)len + 1);
        memcpy(payload, inbuf + pos + HDR, len);
        payload[len] = 0;
        pos += HDR + len;
        dispatch(t, id, payload, len);
        free(payload);
    }
    memmove(inbuf, inbuf + pos, in_len - pos);
    in_len -= pos;
    return 1;
}

/* ---------- allowlist proxy relay: 127.0.0.1:PORT inside -> the host's proxy on a Unix socket ---------- */
static const char *relay_sock;

static void relay(int client) {
    close(0); close(1); close(ep);
    int up = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof a.sun_path, "%s", relay_sock);
    if (up < 0 || connect(up, (struct sockaddr *)&a, sizeof a) != 0) {
        const char *m = "HTTP/1.1 502 Bad Gateway\r\nX-Sparring: the network proxy is not running\r\n\r\n";
        write_all(client, m, strlen(m));
        _exit(0);  /* fail closed */
    }
    struct pollfd p[2] = { { client, POLLIN, 0 }, { up, POLLIN, 0 } };
    int open_in[2] = { 1, 1 };
    char buf[CHUNK];
    while (open_in[0] || open_in[1]) {
        if (poll(p, 2, -1) < 0) { if (errno == EINTR) continue; break; }
        for (int i = 0; i < 2; i++) {
            if (!open_in[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t n = read(p[i].fd, buf, sizeof buf);
            if (n <= 0) { open_in[i] = 0; p[i].fd = -1; shutdown(i ? client : up, SHUT_WR); continue; }
            write_all(i ? client : up, buf, (size_t)n);
        }
    }
    _exit(0);
}

static int listen_local(int port) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 64) != 0) die("proxy listen");
    return s;
}

/*
 * --launch UID GID CGROUP_PROCS_FILES NETNS_FD -- ARGV...: on the host, as root, join the sandbox's
 * cgroups (':'-separated cgroup.procs files, may be empty) and its network namespace (an fd made
 * ready by the host, '-' for none), drop to UID/GID with no supplementary groups, then exec ARGV
 * (bubblewrap). One exec instead of a shell plus setpriv plus nsenter.
 */
static int launch(int argc, char **argv) {
    if (argc < 8 || strcmp(argv[6], "--")) { dprintf(2, "usage: --launch UID GID CGFILES NETNS_FD -- ARGV...\n"); return 2; }
    uid_t uid = (uid_t)strtoul(argv[2], NULL, 10);
    gid_t gid = (gid_t)strtoul(argv[3], NULL, 10);
    char *files = argv[4];
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", getpid());
    for (char *f = strtok(files, ":"); f; f = strtok(NULL, ":")) {
        int fd = open(f, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, pid, (size_t)n) != n) { dprintf(2, "sparring: cannot join cgroup %s: %s\n", f, strerror(errno)); return 125; }
        close(fd);
    }
    if (strcmp(argv[5], "-")) {
        int nfd = atoi(argv[5]);
        if (setns(nfd, CLONE_NEWNET) != 0) { dprintf(2, "sparring: cannot enter the network namespace: %s\n", strerror(errno)); return 125; }
        close(nfd);
    }
    if (setgroups(0, NULL) || setresgid(gid, gid, gid) || setresuid(uid, uid, uid)) {
        dprintf(2, "sparring: cannot drop to uid %u: %s\n", uid, strerror(errno));
        return 125;
    }
    execvp(argv[7], argv + 7);
    dprintf(2, "sparring: cannot run %s: %s\n", argv[7], strerror(errno));
    return 127;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--launch")) return launch(argc, argv);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    born_state();
    signal(SIGPIPE, SIG_IGN);
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    fcntl(0, F_SETFL, O_NONBLOCK);
    struct watch in_w = { 0, NULL }, listen_w = { W_LISTEN, NULL };
    watch_fd(0, EPOLLIN, &in_w);
    int lfd = -1;
    if (argc == 4 && !strcmp(argv[1], "--proxy")) {
        relay_sock = argv[3];
        lfd = listen_local(atoi(argv[2]));
        watch_fd(lfd, EPOLLIN, &listen_w);
    }
    char ready[32];
    int k = snprintf(ready, sizeof ready, "%d", getpid());
    send_frame(T_READY, 0, ready, (uint32_t)k);
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(ep, evs, 64, 1000);
        for (int i = 0; i < n; i++) {
            struct watch *w = evs[i].data.ptr;
            if (w == &in_w) { if (!on_input()) return 0; continue; }
            if (w == &listen_w) {
                int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0) continue;
                pid_t r = fork();
                if (r == 0) relay(c);
                close(c);
                continue;
            }
            struct job *j = w->job;
            if (!job_live(j)) continue; /* finished earlier in this batch */
            if (w->kind == W_OUT) read_out(j, 0);
            else if (w->kind == W_ERR) read_out(j, 1);
            else if (w->kind == W_IN) pump_stdin(j);
        }
        reap();
    }
}
