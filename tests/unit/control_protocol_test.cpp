// The control channel's protocol (agent/control_protocol.hpp): messages survive a round
// trip however the bytes are cut; malformed input of every kind is an error that names
// what was wrong, kills that decoder and nothing else; random and mutated input never
// crashes the decoder, never makes it accept a message that was not encoded whole, and
// never makes it buffer more than the bound. The peer rules of both sides.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <string>

#include "agent/control_protocol.hpp"

namespace {

using namespace utramp::agent::control;
using nlohmann::json;

Message msg(MsgType t, json body) { return Message{t, std::move(body)}; }

TEST(ControlProtocol, RoundTripWhateverTheCuts) {
  const Message a = msg(MsgType::show, json::object());
  const Message b = msg(MsgType::apply_config, {{"config", {{"shm_path", "/dev/shm/x"}, {"filters", {"a*", "b"}}}}});
  const Message c = msg(MsgType::error, {{"error", "n\u00e9e \"quoted\"\n"}});
  const std::string bytes = encode(a) + encode(b) + encode(c);
  std::mt19937 rng(1);
  for (int round = 0; round < 200; ++round) {
    Decoder d;
    std::vector<Message> got;
    for (size_t at = 0; at < bytes.size();) {
      const size_t n = std::min(bytes.size() - at, size_t{1} + rng() % 40);
      d.feed(std::string_view(bytes).substr(at, n));
      at += n;
      for (;;) {
        auto m = d.next();
        ASSERT_TRUE(m) << m.error().message;
        if (!*m) break;
        got.push_back(std::move(**m));
      }
    }
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].type, MsgType::show);
    EXPECT_EQ(got[1].body, b.body);
    EXPECT_EQ(got[2].body["error"], c.body["error"]);
    EXPECT_EQ(d.buffered(), 0u);
  }
}

// A name that is not UTF-8 (a path, a symbol) must not throw in the agent.
TEST(ControlProtocol, NotUtf8IsSentReplaced) {
  const std::string e = encode(msg(MsgType::reply, {{"exe", std::string("/tmp/\xff\xfe")}}));
  Decoder d;
  d.feed(e);
  auto m = d.next();
  ASSERT_TRUE(m && *m);
  EXPECT_EQ((**m).body["exe"], "/tmp/\uFFFD\uFFFD");
}

TEST(ControlProtocol, HeaderIsAsDocumented) {
  const std::string e = encode(msg(MsgType::detach, json::object()));
  ASSERT_EQ(e.size(), kHeaderSize + 2);  // "{}"
  EXPECT_EQ(e.substr(0, 4), "UTCC");
  EXPECT_EQ(static_cast<uint8_t>(e[4]), kVersion);
  EXPECT_EQ(static_cast<uint8_t>(e[5]), 0);
  EXPECT_EQ(static_cast<uint8_t>(e[6]), 2);  // detach
  EXPECT_EQ(static_cast<uint8_t>(e[8]), 2);  // length
  EXPECT_EQ(e.substr(kHeaderSize), "{}");
}

// The error for BYTES fed whole, "" when they decode (or want more).
std::string error_of(const std::string& bytes) {
  Decoder d;
  d.feed(bytes);
  auto m = d.next();
  return m ? "" : m.error().message;
}

std::string header(uint16_t version, uint16_t type, uint32_t length) {
  std::string h = "UTCC";
  h += static_cast<char>(version & 0xff);
  h += static_cast<char>(version >> 8);
  h += static_cast<char>(type & 0xff);
  h += static_cast<char>(type >> 8);
  for (int i = 0; i < 4; ++i) h += static_cast<char>((length >> (8 * i)) & 0xff);
  return h;
}

TEST(ControlProtocol, MalformedSaysWhat) {
  EXPECT_NE(error_of("GET / HTTP/1.1\r\n").find("bad magic"), std::string::npos);
  EXPECT_NE(error_of("U").find(""), std::string::npos);
  EXPECT_EQ(error_of("UTC"), "");  // a prefix of the magic: more is needed
  EXPECT_NE(error_of("UTX").find("bad magic"), std::string::npos);  // told before 12 bytes
  EXPECT_NE(error_of(header(kVersion + 1, 1, 2) + "{}").find(fmt::format("version {}", kVersion + 1)),
            std::string::npos);
  EXPECT_NE(error_of(header(kVersion, 0x77, 2) + "{}").find("unknown type 0x77"), std::string::npos);
  EXPECT_NE(error_of(header(kVersion, 1, kMaxPayload + 1)).find("at most"), std::string::npos);
  EXPECT_NE(error_of(header(kVersion, 1, 3) + "{x}").find("not JSON"), std::string::npos);
  EXPECT_NE(error_of(header(kVersion, 1, 2) + "[]").find("not an object"), std::string::npos);
  EXPECT_EQ(error_of(header(kVersion, 1, kMaxPayload)), "");  // at the bound: waits for it
}

TEST(ControlProtocol, ADeadDecoderStaysDead) {
  Decoder d;
  d.feed("XXXX");
  ASSERT_FALSE(d.next());
  d.feed(encode(msg(MsgType::show, json::object())));  // a good message after the bad bytes
  EXPECT_FALSE(d.next());
  EXPECT_EQ(d.buffered(), 0u);
}

// Random bytes, and good messages with bytes flipped, cut, or inserted: the decoder ends
// every stream with messages that are exactly the ones encoded, or an error; it never
// throws or crashes, and buffers at most one bounded message.
TEST(ControlProtocol, Fuzz) {
  std::mt19937_64 rng(12345);
  const std::vector<Message> good = {msg(MsgType::show, json::object()), msg(MsgType::detach, json::object()),
                                     msg(MsgType::apply_config, {{"config", {{"tracer", "function"}}}}),
                                     msg(MsgType::reply, {{"functions", json::array({1, 2, 3})}})};
  std::vector<std::string> encoded;
  for (const Message& m : good) encoded.push_back(encode(m));
  size_t errors = 0, accepted = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string bytes;
    switch (rng() % 4) {
      case 0:  // noise
        for (size_t n = rng() % 64; n; --n) bytes += static_cast<char>(rng());
        break;
      case 1:  // a good header, random rest
        bytes = encoded[rng() % encoded.size()].substr(0, kHeaderSize);
        for (size_t n = rng() % 64; n; --n) bytes += static_cast<char>(rng());
        break;
      default: {  // good messages, mutated
        for (size_t n = 1 + rng() % 3; n; --n) bytes += encoded[rng() % encoded.size()];
        for (size_t n = rng() % 4; n; --n) {
          const size_t at = rng() % bytes.size();
          switch (rng() % 3) {
            case 0: bytes[at] = static_cast<char>(rng()); break;
            case 1: bytes.erase(at, 1 + rng() % 4); break;
            default: bytes.insert(at, 1, static_cast<char>(rng())); break;
          }
          if (bytes.empty()) break;
        }
      }
    }
    Decoder d;
    size_t at = 0;
    bool dead = false;
    while (at < bytes.size() && !dead) {
      const size_t n = std::min(bytes.size() - at, size_t{1} + rng() % 32);
      d.feed(std::string_view(bytes).substr(at, n));
      at += n;
      for (;;) {
        auto m = d.next();
        if (!m) {
          ++errors;
          dead = true;
          EXPECT_EQ(m.error().code, utramp::Errc::bad_format);
          break;
        }
        if (!*m) break;
        ++accepted;
        // Whatever came through is a whole message whose encoding is well formed again.
        Decoder again;
        again.feed(encode(**m));
        auto back = again.next();
        ASSERT_TRUE(back && *back);
        EXPECT_EQ((*back)->body, (*m)->body);
        EXPECT_TRUE((*m)->body.is_object());
      }
      EXPECT_LE(d.buffered(), kHeaderSize + kMaxPayload);
    }
  }
  // Both outcomes happen (the generator is not degenerate).
  EXPECT_GT(errors, 1000u);
  EXPECT_GT(accepted, 1000u);
}

TEST(ControlProtocol, SocketNameIsAbstractAndPerProcess) {
  EXPECT_EQ(socket_name(1234), "utramp/1234");
  sockaddr_un a;
  socklen_t len;
  socket_address(1234, &a, &len);
  EXPECT_EQ(a.sun_path[0], '\0');
  EXPECT_EQ(std::string(a.sun_path + 1, len - offsetof(sockaddr_un, sun_path) - 1), "utramp/1234");
}

TEST(ControlProtocol, PeerRules) {
  EXPECT_TRUE(peer_allowed({10, 1000, 1000}, 1000, false));
  EXPECT_TRUE(peer_allowed({10, 0, 0}, 1000, false));       // root
  EXPECT_TRUE(peer_allowed({10, 1001, 1001}, 1000, true));  // CAP_SYS_PTRACE
  auto no = peer_allowed({10, 65534, 65534}, 1000, false);
  ASSERT_FALSE(no);
  EXPECT_NE(no.error().message.find("uid 65534"), std::string::npos);
  EXPECT_TRUE(server_is({42, 1000, 1000}, 42, 1000));
  auto squat = server_is({43, 1001, 1001}, 42, 1000);
  ASSERT_FALSE(squat);
  EXPECT_NE(squat.error().message.find("held by process 43 (uid 1001)"), std::string::npos);
  EXPECT_FALSE(server_is({42, 1001, 1001}, 42, 1000));
}

// A process with no agent: connecting says so, by name.
TEST(ControlProtocol, NoAgentListening) {
  auto fd = connect_to(getpid());
  ASSERT_FALSE(fd);
  EXPECT_NE(fd.error().message.find("no utramp agent listening"), std::string::npos) << fd.error().message;
  EXPECT_NE(fd.error().message.find(fmt::format("@utramp/{}", getpid())), std::string::npos);
}

// Someone else holds @utramp/PID (a squatter: here this test, for a child that has no
// agent): the client refuses to talk to it, naming who holds it.
TEST(ControlProtocol, SquatterIsRefused) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un a;
  socklen_t len;
  socket_address(child, &a, &len);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), len), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  auto c = connect_to(child);
  EXPECT_FALSE(c);
  if (!c) {
    EXPECT_NE(c.error().message.find(fmt::format("held by process {}", getpid())), std::string::npos)
        << c.error().message;
  } else {
    close(*c);
  }
  close(fd);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

}  // namespace
