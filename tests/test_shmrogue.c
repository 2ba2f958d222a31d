/* A stranger on the host cannot take a rank's shared-memory segment. Each
 * rank's setup socket has a public name (/proc/net/unix lists it), so here
 * a rogue of the same user connects to every rank's socket first, before
 * the rank's peers can (this program's listen() holds each rank there until
 * it has), one connection saying nothing and one with a made-up hello
 * claiming a peer's rank; the communicator must still come up and work,
 * the rogue must be handed no descriptor, and a rank must say whom it
 * refused (a WARN naming the rogue's pid).
 *   fork N       ranks are processes; the rogue another process (its pid
 *                is no peer's)
 *   fork N flood the same, and the rogue also fills the listening queue of
 *                the first rank to listen, so that its peers' connect()
 *                may find it full
 *   threads N    ranks are threads of this process (ncclCommInitAll) and
 *                the rogue a thread of it too: the same pid as every peer,
 *                so only the token keeps it out
 *   pidns N      as fork, with the odd ranks in a user and pid namespace
 *                of their own (containers sharing a network namespace):
 *                pids of different namespaces are not compared, so init
 *                works, and the rogue still gets nothing (skipped, 77,
 *                where namespaces cannot be made)
 * It only ever connects to sockets this program's ranks listen on: it
 * learns their names in listen(), nothing else on the host is touched.
 *   test_shmrogue fork|threads|pidns N [flood] */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define MAX_NAMES 16
#define MAX_ROGUE_FDS 512

/* Shared between the ranks (their listen()) and the rogue. */
struct board {
  int nnames;
  socklen_t len[MAX_NAMES];
  struct sockaddr_un name[MAX_NAMES];
  int ready[MAX_NAMES];     /* the name is filled in */
  int connected[MAX_NAMES]; /* the rogue is in its queue: the rank may go on */
  int flood;                /* also fill the first socket's queue */
  int nranks;
  int stop;
  int connects; /* rogue connections made */
  int taken;    /* descriptors the rogue was handed */
  int refusedEof; /* rogue connections the rank closed */
};
static struct board *board;

/* Every listen() of this process (and its forked ranks) goes through here:
 * a chorus setup socket is reported to the rogue, and the rank waits (at
 * most 10 s) until the rogue is in its queue. */
__attribute__((visibility("default"))) int listen(int fd, int backlog) {
  static int (*real)(int, int); /* rank threads may come at once */
  int (*call)(int, int) = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
  if (!call) {
    call = (int (*)(int, int))dlsym(RTLD_NEXT, "listen");
    __atomic_store_n(&real, call, __ATOMIC_RELEASE);
  }
  int rc = call(fd, backlog);
  struct sockaddr_un a;
  memset(&a, 0, sizeof a); /* the name's end is a NUL */
  socklen_t len = sizeof a;
  if (rc != 0 || !board || getsockname(fd, (struct sockaddr *)&a, &len) != 0 || a.sun_family != AF_UNIX ||
      len <= offsetof(struct sockaddr_un, sun_path) + 8 || a.sun_path[0] != 0 || strncmp(a.sun_path + 1, "chorus-", 7))
    return rc;
  int i = __atomic_fetch_add(&board->nnames, 1, __ATOMIC_ACQ_REL);
  if (i >= MAX_NAMES) return rc;
  board->name[i] = a;
  board->len[i] = len;
  __atomic_store_n(&board->ready[i], 1, __ATOMIC_RELEASE);
  double end = nowSec() + 10;
  while (!__atomic_load_n(&board->connected[i], __ATOMIC_ACQUIRE) && nowSec() < end) usleep(200);
  return rc;
}

static int rogueConnect(const struct board *bd, int i) {
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s >= 0 && connect(s, (const struct sockaddr *)&bd->name[i], bd->len[i]) == 0) return s;
  if (s >= 0) close(s);
  return -1;
}

/* The rogue: connects to each name as it comes, then reads what it is
 * sent until told to stop, counting descriptors. */
static void *rogue(void *unused) {
  int fds[MAX_ROGUE_FDS], nfds = 0, done = 0;
  while (!__atomic_load_n(&board->stop, __ATOMIC_ACQUIRE)) {
    for (; done < MAX_NAMES && __atomic_load_n(&board->ready[done], __ATOMIC_ACQUIRE); done++) {
      /* The rank's number is the name's last part: claim the next rank's. */
      const char *dash = strrchr(board->name[done].sun_path + 1, '-');
      int rank = dash ? atoi(dash + 1) : 0;
      struct {
        int32_t rank;
        uint32_t zero;
        uint64_t token[2];
      } hello = {(rank + 1) % board->nranks, 0, {0x0123456789abcdefull, 0}};
      for (int k = 0; k < 2 && nfds < MAX_ROGUE_FDS; k++) {
        int s = rogueConnect(board, done);
        if (s < 0) continue;
        if (k == 1 && send(s, &hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello) perror("rogue send");
        fds[nfds++] = s;
      }
      /* Flood: fill the first rank's queue (a nonblocking connect fails once it is full). */
      for (int k = 0; board->flood && done == 0 && k < 64 && nfds < MAX_ROGUE_FDS; k++) {
        int s = rogueConnect(board, done);
        if (s < 0) break;
        fds[nfds++] = s;
      }
      __atomic_store_n(&board->connects, nfds, __ATOMIC_RELEASE);
      __atomic_store_n(&board->connected[done], 1, __ATOMIC_RELEASE);
    }
    for (int i = 0; i < nfds; i++) {
      if (fds[i] < 0) continue;
      char buf[64];
      union {
        char buf[CMSG_SPACE(sizeof(int) * 4)];
        struct cmsghdr align;
      } u;
      struct iovec iov = {buf, sizeof buf};
      struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
      ssize_t n = recvmsg(fds[i], &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
          int got = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
          for (int k = 0; k < got; k++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof fd);
            close(fd);
          }
          __atomic_add_fetch(&board->taken, got, __ATOMIC_ACQ_REL);
        }
      if (n <= 0) { /* closed by the rank */
        close(fds[i]);
        fds[i] = -1;
        __atomic_add_fetch(&board->refusedEof, 1, __ATOMIC_ACQ_REL);
      }
    }
    usleep(200);
  }
  for (int i = 0; i < nfds; i++)
    if (fds[i] >= 0) close(fds[i]);
  return unused;
}

#define COUNT 1024

static int check(ncclComm_t *comms, int nranks) {
  float *in[8], *out[8];
  for (int r = 0; r < nranks; r++) {
    in[r] = guardAlloc(COUNT * sizeof(float));
    out[r] = guardAlloc(COUNT * sizeof(float));
    for (int i = 0; i < COUNT; i++) in[r][i] = (float)(r + 1) * (float)(i % 7);
  }
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < nranks; r++) NCCLCHECK(ncclAllReduce(in[r], out[r], COUNT, ncclFloat, ncclSum, comms[r], NULL));
  NCCLCHECK(ncclGroupEnd());
  float sum = (float)(nranks * (nranks + 1) / 2);
  for (int r = 0; r < nranks; r++) {
    for (int i = 0; i < COUNT; i++) EXPECT(out[r][i] == sum * (float)(i % 7), "rank %d [%d] = %g", r, i, out[r][i]);
    EXPECT(guardCheck(in[r]) == 0 && guardCheck(out[r]) == 0, "guards of rank %d", r);
    guardFree(in[r]);
    guardFree(out[r]);
  }
  return 0;
}

static int rankBody(int rank, int nranks, ncclUniqueId id) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));
  float *buf = guardAlloc(COUNT * sizeof(float));
  for (int i = 0; i < COUNT; i++) buf[i] = (float)(rank + 1);
  NCCLCHECK(ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, comm, NULL));
  for (int i = 0; i < COUNT; i++) EXPECT(buf[i] == (float)(nranks * (nranks + 1) / 2), "[%d] = %g", i, buf[i]);
  EXPECT(guardCheck(buf) == 0, "guards");
  guardFree(buf);
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static int writeFile(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int bad = fputs(text, f) < 0;
  return fclose(f) != 0 || bad ? -1 : 0;
}

/* Into a new user namespace (this user as its root, as `unshare -r`) and a
 * new pid namespace, which the next child forked enters as its pid 1. */
static int enterPidNamespace(void) {
  char map[64];
  unsigned uid = (unsigned)geteuid(), gid = (unsigned)getegid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0) return -1;
  writeFile("/proc/self/setgroups", "deny"); /* absent on old kernels */
  snprintf(map, sizeof map, "0 %u 1", uid);
  if (writeFile("/proc/self/uid_map", map) != 0) return -1;
  snprintf(map, sizeof map, "0 %u 1", gid);
  return writeFile("/proc/self/gid_map", map);
}

/* arg (pidns): odd ranks run in a pid namespace of their own, as ranks in
 * containers that share the host's network namespace do: their peers'
 * SO_PEERCRED pids are not the pids they reported. The namespaces are a
 * child's, whose own child is the rank (pid 1 there): a process that made
 * a pid namespace cannot start threads, as LeakSanitizer's check at the
 * rank's end does. */
static int waitChild(pid_t child) {
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return 1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
static int rogueRank(int rank, int nranks, ncclUniqueId id, void *arg) {
  if (!arg || rank % 2 == 0) return rankBody(rank, nranks, id);
  pid_t maker = fork();
  if (maker == 0) {
    alarm(40);
    if (enterPidNamespace() != 0) {
      perror("a pid namespace");
      _exit(1);
    }
    pid_t child = fork();
    if (child == 0) {
      int rc = getpid() == 1 ? rankBody(rank, nranks, id) : 1;
      fflush(NULL);
      _exit(rc);
    }
    _exit(waitChild(child));
  }
  return waitChild(maker);
}

/* 1 when this process may make namespaces as enterPidNamespace does. */
static int pidNamespacesAllowed(void) {
  pid_t pid = fork();
  if (pid == 0) _exit(enterPidNamespace() == 0 ? 0 : 1);
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Lines of the logs in dir that hold both a and b (b NULL: a alone). */
static int logLines(const char *dir, const char *a, const char *b) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    char path[512], line[2048];
    if (strncmp(e->d_name, "log.", 4) != 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) n += strstr(line, a) && (!b || strstr(line, b));
    if (f) fclose(f);
  }
  closedir(d);
  return n;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "fork";
  int nranks = argc > 2 ? atoi(argv[2]) : 2;
  if (nranks < 2 || nranks > 8) return 2;
  int threads = strcmp(mode, "threads") == 0, pidns = strcmp(mode, "pidns") == 0;
  if (pidns && !pidNamespacesAllowed()) {
    printf("pidns: this process may not make user and pid namespaces: skipped\n");
    return 77;
  }
  board = mmap(NULL, sizeof *board, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (board == MAP_FAILED) return 2;
  board->nranks = nranks;
  board->flood = argc > 3 && strcmp(argv[3], "flood") == 0;
  /* The old library handed the segment to the rogue, and its ranks then
   * waited for the peer it never served: fail in seconds, not minutes. */
  setenv("CHORUS_TIMEOUT", "10", 0);
  char dir[64];
  if (logPerProcess(dir, "shmrogue", "INIT,SHM") != 0) return 2;

  int failed;
  pid_t roguePid;
  if (threads) {
    pthread_t t;
    roguePid = getpid();
    if (pthread_create(&t, NULL, rogue, NULL) != 0) return 2;
    ncclComm_t comms[8];
    ncclResult_t res = ncclCommInitAll(comms, nranks, NULL);
    failed = res != ncclSuccess;
    if (failed) fprintf(stderr, "ncclCommInitAll: %s\n", ncclGetErrorString(res));
    if (!failed) {
      failed = check(comms, nranks);
      for (int r = 0; r < nranks; r++) failed |= ncclCommDestroy(comms[r]) != ncclSuccess;
    }
    __atomic_store_n(&board->stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
  } else {
    /* A process of its own, forked before this one has threads. */
    roguePid = fork();
    if (roguePid < 0) return 2;
    if (roguePid == 0) {
      alarm(60);
      rogue(NULL);
      _exit(0);
    }
    failed = runRanks(nranks, rogueRank, pidns ? board : NULL, 25);
    __atomic_store_n(&board->stop, 1, __ATOMIC_RELEASE);
    waitpid(roguePid, NULL, 0);
  }

  int bad = 0;
  if (failed) {
    fprintf(stderr, "the communicator did not work with the rogue about (%d failed)\n", failed);
    bad = 1;
  }
  if (board->taken) {
    fprintf(stderr, "the rogue (pid %d) was handed %d descriptor(s)\n", (int)roguePid, board->taken);
    bad = 1;
  }
  if (board->nnames != nranks || board->connects < 2 * nranks) {
    fprintf(stderr, "the rogue saw %d setup sockets of %d ranks and made %d connections: it did not test them\n",
            board->nnames, nranks, board->connects);
    bad = 1;
  }
  /* Each rank reads the made-up hello before its peers' (it came first)
   * and refuses it, naming the rogue; in one process the pid is every
   * peer's, and the token is what it lacks. */
  char refused[96], local[64];
  snprintf(refused, sizeof refused, "refused a connection to its setup socket from pid %d ", (int)roguePid);
  int said = logLines(dir, refused, threads ? "does not have this communicator's token" : NULL);
  if (said < 1) {
    fprintf(stderr, "no rank said it refused pid %d (%d lines in %s)\n", (int)roguePid, said, dir);
    bad = 1;
  }
  /* And every rank had its peers on shared memory. */
  snprintf(local, sizeof local, "bytes per rank, %d local ranks", nranks);
  int onShm = logLines(dir, "SHM : segment of", local);
  if (!failed && onShm != nranks) {
    fprintf(stderr, "%d of %d ranks say they set up shared memory with %d local ranks\n", onShm, nranks, nranks);
    bad = 1;
  }
  printf("%s %d%s: %d connections from the rogue, %d closed by the ranks, %d descriptors taken, %d refusals "
         "logged: %s\n", mode, nranks, board->flood ? " flood" : "", board->connects, board->refusedEof,
         board->taken, said, bad ? "FAIL" : "ok");
  return bad;
}
