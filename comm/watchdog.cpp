#include "comm/watchdog.h"

#include <algorithm>
#include <deque>
#include <map>
#include <thread>

namespace feast::watchdog {
namespace {

constexpr int kQuery = 1;  // "are you alive?": one int, the asker's world rank
constexpr int kAnswer = 2;  // "waiting in ...": the answerer's description, chars
constexpr size_t kMaxAnswer = 400;

MPI_Comm g_comm = MPI_COMM_NULL;
// Only the thread that started the channel uses it (the checkpoint writer's thread also waits
// on MPI, but two threads probing one communicator could steal each other's messages).
std::thread::id g_owner;
int g_rank = 0, g_size = 1;
// Messages sent with MPI_Isend must outlive the call; the channel is used only on the way to
// ending the job, so they are simply kept.
std::deque<std::string> g_sent;

void send_text(const std::string& text, int to, int tag) {
  g_sent.push_back(text.substr(0, kMaxAnswer));
  MPI_Request r;
  if (MPI_Isend(g_sent.back().data(), int(g_sent.back().size()), MPI_CHAR, to, tag, g_comm, &r) == MPI_SUCCESS)
    MPI_Request_free(&r);
}

// Receives any answers waiting; records who answered and what they said.
void collect(std::map<int, std::string>& alive) {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kAnswer, g_comm, &flag, &st) != MPI_SUCCESS || !flag) return;
    int n = 0;
    MPI_Get_count(&st, MPI_CHAR, &n);
    std::string text(size_t(std::max(n, 0)), '\0');
    MPI_Recv(text.data(), n, MPI_CHAR, st.MPI_SOURCE, kAnswer, g_comm, MPI_STATUS_IGNORE);
    alive[st.MPI_SOURCE] = text;
  }
}

// Answers pending queries; returns the ranks that asked (they are alive and timed out too).
std::vector<int> answer(const std::string& waiting_on) {
  std::vector<int> askers;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kQuery, g_comm, &flag, &st) != MPI_SUCCESS || !flag) break;
    int asker = 0;
    MPI_Recv(&asker, 1, MPI_INT, st.MPI_SOURCE, kQuery, g_comm, MPI_STATUS_IGNORE);
    send_text(waiting_on, st.MPI_SOURCE, kAnswer);
    askers.push_back(st.MPI_SOURCE);
  }
  return askers;
}

std::string list(const std::vector<int>& ranks) {
  std::string s;
  const size_t shown = std::min<size_t>(ranks.size(), 16);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > shown) s += " and " + std::to_string(ranks.size() - shown) + " more";
  return s;
}

}  // namespace

void start() {
  if (g_comm != MPI_COMM_NULL) return;
  MPI_Comm_dup(MPI_COMM_WORLD, &g_comm);
  g_owner = std::this_thread::get_id();
  MPI_Comm_set_errhandler(g_comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(g_comm, &g_rank);
  MPI_Comm_size(g_comm, &g_size);
}

void serve(const std::string& waiting_on) {
  if (g_comm == MPI_COMM_NULL || g_size == 1 || std::this_thread::get_id() != g_owner) return;
  answer(waiting_on);
}

std::string survey(const std::vector<int>& group_world_ranks, const std::string& waiting_on,
                   std::chrono::milliseconds grace) {
  if (g_comm == MPI_COMM_NULL || g_size == 1 || std::this_thread::get_id() != g_owner) return "";
  for (int r = 0; r < g_size; ++r)
    if (r != g_rank) send_text(std::to_string(g_rank), r, kQuery);
  std::map<int, std::string> alive;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    for (int asker : answer(waiting_on)) alive.try_emplace(asker, "");
    collect(alive);
    if (int(alive.size()) == g_size - 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<int> late, late_elsewhere;
  for (int r = 0; r < g_size; ++r) {
    if (r == g_rank || alive.count(r)) continue;
    const bool in_group = std::find(group_world_ranks.begin(), group_world_ranks.end(), r) != group_world_ranks.end();
    (in_group ? late : late_elsewhere).push_back(r);
  }
  std::string out;
  if (!late.empty())
    out = "late: world rank(s) " + list(late) + " of this group did not answer the watchdog within " +
          std::to_string(grace.count()) + " ms (stalled, hung or dead)";
  else if (!late_elsewhere.empty())
    out = "every rank of this group answered; world rank(s) " + list(late_elsewhere) +
          " did not (stalled, hung or dead)";
  else
    out = "every rank answered the watchdog: the ranks are waiting in different calls (a mismatch)";
  std::string waiting;
  int shown = 0;
  for (const auto& [rank, what] : alive) {
    if (what.empty() || ++shown > 4) continue;
    waiting += "; rank " + std::to_string(rank) + " waits in " + what;
  }
  return out + waiting;
}

std::vector<int> world_ranks_of(MPI_Comm comm) {
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int n = 0;
  MPI_Group_size(group, &n);
  std::vector<int> mine(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) mine[size_t(i)] = i;
  MPI_Group_translate_ranks(group, n, mine.data(), world, out.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return out;
}

}  // namespace feast::watchdog
