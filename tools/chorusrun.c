/* chorusrun: starts N local ranks of a program, like `torchrun --standalone`.
 *   chorusrun -n N [--tag-output] [--] PROGRAM [ARGS...]
 * Each rank gets CHORUS_RANK/CHORUS_NRANKS/CHORUS_LOCAL_RANK, the torchrun
 * names (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT) and NCCL_COMM_ID for the rendezvous (chorusCommInitFromEnv),
 * with a random CHORUS_SECRET for the job unless one is given.
 * Each rank runs in a session of its own, as torchrun's workers do: a
 * terminal's Ctrl-C reaches chorusrun alone, which forwards it (and
 * SIGTERM/SIGHUP) once to each rank's process group, so that a rank started
 * through a shell or wrapper is stopped with its children. When a rank fails
 * the others' groups get SIGTERM (and SIGCONT, should they be stopped),
 * SIGKILL 5 s later if they are still there, and chorusrun exits with the
 * failed rank's status once every rank is gone. A rank whose chorusrun dies
 * (SIGKILL) is killed with it. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pid_t *pids;
static int nranks;
static volatile sig_atomic_t pendingSignal;

static void onSignal(int sig) { pendingSignal = sig; }

/* Each rank leads a process group (setsid below); a rank not yet reaped
 * holds its pid, so the group's number cannot name anyone else's. One
 * forked a moment ago may not lead its group yet: then the process alone. */
static void killAll(int sig) {
  for (int r = 0; r < nranks; r++)
    if (pids[r] > 0 && kill(-pids[r], sig) != 0 && errno == ESRCH) kill(pids[r], sig);
}

/* N of -n: a whole positive number, all of the argument, or usage. */
static int parseRanks(const char *text) {
  char *end;
  errno = 0;
  long n = strtol(text, &end, 10);
  if (errno || !(*text >= '0' && *text <= '9') || *end || n < 1 || n > 1 << 20) { /* no blank, no sign */
    fprintf(stderr, "chorusrun: -n wants a number of ranks from 1 to %d, not '%s'\n", 1 << 20, text);
    exit(2);
  }
  return (int)n;
}

/* A port of the loopback nobody uses now, kept bound for the job's life:
 * no other bind (another job's, a connect's ephemeral port) can take it
 * between this pick and rank 0's listen, while rank 0, which sets
 * SO_REUSEADDR as chorus's root and torch's TCPStore do, can still bind and
 * listen on it, since this socket never listens. Not inherited: the ranks
 * do not hold it. */
static int freePort(void) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  if (s >= 0) setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0 || getsockname(s, (struct sockaddr *)&a, &len) < 0) {
    perror("chorusrun: cannot find a free port");
    exit(1);
  }
  return ntohs(a.sin_port);
}

/* On stdout with status 0 when asked for (--help), else on stderr with 2. */
static void usage(int asked) {
  fprintf(asked ? stdout : stderr,
          "usage: chorusrun -n N [--tag-output] [--] PROGRAM [ARGS...]\n"
          "Starts N ranks of PROGRAM on this host with CHORUS_RANK, CHORUS_NRANKS, CHORUS_LOCAL_RANK,\n"
          "RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/MASTER_PORT, NCCL_COMM_ID and a random\n"
          "CHORUS_SECRET for the job (unless CHORUS_SECRET or CHORUS_SECRET_FILE is set) set; as soon\n"
          "as one rank fails, stops the others and exits with its status.\n"
          "  -n, --nproc N   number of ranks\n"
          "  --tag-output    prefix every output line with [rank]\n"
          "  -h, --help      this text\n");
  exit(asked ? 0 : 2);
}

/* Copies complete lines from fd to out with a "[rank] " prefix. */
struct tagBuf {
  char data[8192];
  size_t len;
};
static int pumpTagged(int fd, int rank, struct tagBuf *b, FILE *out) {
  ssize_t n = read(fd, b->data + b->len, sizeof b->data - b->len - 1);
  if (n <= 0) {
    if (b->len) fprintf(out, "[%d] %.*s\n", rank, (int)b->len, b->data);
    b->len = 0;
    return 0;
  }
  b->len += (size_t)n;
  char *start = b->data, *nl;
  while ((nl = memchr(start, '\n', b->len - (start - b->data)))) {
    fprintf(out, "[%d] %.*s\n", rank, (int)(nl - start), start);
    start = nl + 1;
  }
  size_t rest = b->len - (start - b->data);
  if (rest == sizeof b->data - 1) { /* a very long line: flush it as is */
    fprintf(out, "[%d] %.*s\n", rank, (int)rest, start);
    rest = 0;
  }
  memmove(b->data, start, rest);
  b->len = rest;
  fflush(out);
  return 1;
}

int main(int argc, char **argv) {
  int i = 1, tag = 0;
  nranks = 0;
  for (; i < argc; i++) {
    if (!strcmp(argv[i], "-n") || !strcmp(argv[i], "--nproc")) {
      if (++i >= argc) usage(0);
      nranks = parseRanks(argv[i]);
    } else if (!strncmp(argv[i], "-n", 2) && argv[i][2]) {
      nranks = parseRanks(argv[i] + 2);
    } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      usage(1);
    } else if (!strcmp(argv[i], "--tag-output")) {
      tag = 1;
    } else if (!strcmp(argv[i], "--")) {
      i++;
      break;
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "chorusrun: unknown option %s\n", argv[i]);
      usage(0);
    } else {
      break;
    }
  }
  if (nranks < 1 || i >= argc) usage(0);
  char **prog = &argv[i];
  /* Two ports: the rendezvous (NCCL_COMM_ID, rank 0's chorus root) and
   * MASTER_PORT, where torch's TCPStore listens on rank 0 beside it. */
  int port = freePort(), masterPort = freePort();
  char buf[64];
  snprintf(buf, sizeof buf, "127.0.0.1:%d", port);
  /* One job on this host: a rendezvous the caller set (to join ranks on
   * other hosts) is not what its ranks use, which it must say. */
  const char *was = getenv("NCCL_COMM_ID");
  if (was && *was && strcmp(was, buf) != 0)
    fprintf(stderr, "chorusrun: NCCL_COMM_ID=%s is replaced by this job's own rendezvous (%s): chorusrun starts %d "
            "rank(s) on this host alone; to join ranks on other hosts, start each rank with NCCL_COMM_ID, "
            "CHORUS_RANK and CHORUS_NRANKS set (see the README, \"Running on several hosts\")\n",
            was, buf, nranks);
  setenv("NCCL_COMM_ID", buf, 1);
  /* A secret per job, so that nobody else who reaches the port joins or
   * disturbs it (one the caller set is kept, to join ranks started
   * elsewhere). */
  const char *given = getenv("CHORUS_SECRET"), *givenFile = getenv("CHORUS_SECRET_FILE");
  if (!(given && *given) && !(givenFile && *givenFile)) {
    unsigned char r[16];
    char hex[sizeof r * 2 + 1];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
      perror("chorusrun: getrandom");
      return 1;
    }
    for (size_t k = 0; k < sizeof r; k++) snprintf(hex + 2 * k, 3, "%02x", r[k]);
    setenv("CHORUS_SECRET", hex, 1);
  }
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  snprintf(buf, sizeof buf, "%d", masterPort);
  setenv("MASTER_PORT", buf, 1);
  snprintf(buf, sizeof buf, "%d", nranks);
  setenv("CHORUS_NRANKS", buf, 1);
  setenv("WORLD_SIZE", buf, 1);
  setenv("LOCAL_WORLD_SIZE", buf, 1);

  struct sigaction sa = {0};
  sa.sa_handler = onSignal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);

  pids = calloc(nranks, sizeof *pids);
  int (*pipes)[2] = calloc((size_t)nranks * 2, sizeof *pipes);
  struct tagBuf *bufs = tag ? calloc((size_t)nranks * 2, sizeof *bufs) : NULL;
  struct pollfd *pfd = calloc((size_t)nranks * 2, sizeof *pfd);
  if (!pids || !pipes || (tag && !bufs) || !pfd) {
    fprintf(stderr, "chorusrun: out of memory for %d ranks\n", nranks);
    return 1;
  }
  fflush(NULL);
  pid_t launcher = getpid();
  /* A rank that cannot be started (fork fails: the process limit) stops
   * the job like a rank that fails: the others started get SIGTERM. */
  int started = nranks, status = 0, failedRank = -1;
  for (int r = 0; r < nranks; r++) {
    if (tag && (pipe(pipes[2 * r]) < 0 || pipe(pipes[2 * r + 1]) < 0)) {
      perror("chorusrun: pipe");
      killAll(SIGKILL);
      return 1;
    }
    pids[r] = fork();
    if (pids[r] < 0) {
      fprintf(stderr, "chorusrun: cannot start rank %d of %d: %s; stopping the others\n", r, nranks, strerror(errno));
      pids[r] = 0;
      if (tag) close(pipes[2 * r][0]), close(pipes[2 * r][1]), close(pipes[2 * r + 1][0]), close(pipes[2 * r + 1][1]);
      started = r;
      failedRank = r;
      status = 1;
      killAll(SIGTERM);
      break;
    }
    if (pids[r] == 0) {
      /* Its own session: no terminal signals (chorusrun forwards them once),
       * and no SIGTTIN should it read the terminal (a new process group of
       * the same session would be a background one). */
      setsid();
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(128 + SIGKILL); /* chorusrun died before the line above */
      snprintf(buf, sizeof buf, "%d", r);
      setenv("CHORUS_RANK", buf, 1);
      setenv("CHORUS_LOCAL_RANK", buf, 1);
      setenv("RANK", buf, 1);
      setenv("LOCAL_RANK", buf, 1);
      if (tag) {
        dup2(pipes[2 * r][1], 1);
        dup2(pipes[2 * r + 1][1], 2);
        for (int k = 0; k <= 2 * r + 1; k++) close(pipes[k][0]), close(pipes[k][1]);
      }
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      execvp(prog[0], prog);
      fprintf(stderr, "chorusrun: cannot run %s: %s\n", prog[0], strerror(errno));
      _exit(127);
    }
    if (tag) close(pipes[2 * r][1]), close(pipes[2 * r + 1][1]);
  }
  int left = started, open = tag ? 2 * started : 0;
  for (int k = 0; tag && k < 2 * started; k++) pfd[k] = (struct pollfd){pipes[k][0], POLLIN, 0};
  time_t killAt = failedRank >= 0 ? time(NULL) + 5 : 0;
  /* Output is passed on until every rank's pipes close, but once the job
   * is being stopped and every rank is gone, no longer than until killAt: a
   * rank's orphaned child may hold them open. */
  while (left > 0 || (open > 0 && !(killAt && time(NULL) >= killAt))) {
    if (pendingSignal) {
      killAll(pendingSignal);
      killAll(SIGCONT);
      if (!killAt) killAt = time(NULL) + 5;
      pendingSignal = 0;
    }
    if (open > 0 && poll(pfd, 2 * started, 20) > 0)
      for (int k = 0; k < 2 * started; k++)
        if (pfd[k].fd >= 0 && (pfd[k].revents & (POLLIN | POLLHUP)))
          if (!pumpTagged(pfd[k].fd, k / 2, &bufs[k], k % 2 ? stderr : stdout)) {
            close(pfd[k].fd);
            pfd[k].fd = -1;
            open--;
          }
    int st;
    /* Once the others are being stopped, look every 20 ms: one that
     * outlives SIGTERM gets SIGKILL at killAt. */
    int poll20 = open == 0 && killAt;
    pid_t p = left > 0 ? waitpid(-1, &st, open > 0 || killAt ? WNOHANG : 0) : 0;
    if (p < 0 && errno == EINTR) continue;
    if (p < 0 && errno == ECHILD) left = 0; /* none left to wait for (never a busy loop) */
    if (p == 0 && poll20) poll(NULL, 0, 20);
    if (p > 0) {
      left--;
      int r = 0;
      while (r < nranks && pids[r] != p) r++;
      if (r < nranks) pids[r] = 0;
      int bad = !WIFEXITED(st) || WEXITSTATUS(st) != 0;
      /* A rank that failed leaves nothing running either: what it started
       * in its group (a wrapper's children) is stopped too, now (its group
       * is still there, and so its number taken, while anyone is in it). */
      if (bad && r < nranks) kill(-p, SIGTERM);
      if (bad && failedRank < 0) {
        failedRank = r;
        status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (WIFSIGNALED(st)) fprintf(stderr, "chorusrun: rank %d killed by signal %d; stopping the others\n", r, WTERMSIG(st));
        else fprintf(stderr, "chorusrun: rank %d exited with status %d; stopping the others\n", r, WEXITSTATUS(st));
        killAll(SIGTERM);
        killAll(SIGCONT); /* a stopped rank too: it ends now, or at killAt */
        killAt = time(NULL) + 5;
      }
    }
    if (killAt && time(NULL) >= killAt) killAll(SIGKILL);
  }
  free(pids);
  free(pipes);
  free(bufs);
  free(pfd);
  return status;
}
