#include "tools/volume_key_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iterator>

#include "store/crypto/volume_key.h"
#include "store/error.h"

namespace densefs::tools {
namespace {

using store::store_error;

std::string mode_text(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// The signal that interrupted a hidden read (0: none).
volatile sig_atomic_t interrupted_by = 0;
extern "C" void note_signal(int sig) {
  interrupted_by = sig;
}

// One line typed at the terminal with echo off; nullopt without a terminal.
// Ctrl-C and the like end the read: the terminal's echo is back on before
// the signal takes its usual effect.
std::optional<std::string> read_hidden_line(const std::string& prompt) {
  const int fd = ::open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  termios saved{};
  if (::tcgetattr(fd, &saved) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  termios quiet = saved;
  quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
  quiet.c_lflag |= ICANON;
  // Ctrl-Z keeps its usual effect (the read goes on after `fg`); a signal
  // the caller ignores (nohup's SIGHUP) stays ignored.
  const int stop_signals[] = {SIGINT, SIGTERM, SIGQUIT, SIGHUP};
  struct sigaction note {};
  note.sa_handler = note_signal;  // no SA_RESTART: the read returns EINTR
  sigemptyset(&note.sa_mask);
  struct sigaction before[std::size(stop_signals)];
  interrupted_by = 0;
  for (std::size_t i = 0; i < std::size(stop_signals); ++i) {
    ::sigaction(stop_signals[i], nullptr, &before[i]);
    if (before[i].sa_handler != SIG_IGN) ::sigaction(stop_signals[i], &note, nullptr);
  }
  const auto restore = [&] {
    ::tcsetattr(fd, TCSAFLUSH, &saved);
    for (std::size_t i = 0; i < std::size(stop_signals); ++i)
      ::sigaction(stop_signals[i], &before[i], nullptr);
  };
  if (::tcsetattr(fd, TCSAFLUSH, &quiet) != 0) {
    const int e = errno;
    restore();
    ::close(fd);
    throw store_error(
        e, "cannot turn off the terminal's echo to read a passphrase: " + store::errno_text(e));
  }
  (void)!::write(fd, prompt.data(), prompt.size());
  std::string line;
  bool too_long = false;
  int error = 0;
  for (;;) {
    char c;
    const ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR && interrupted_by == 0) continue;
    if (n < 0) error = errno;
    if (n <= 0 || c == '\n') break;
    if (line.size() < store::k_max_key_file_size)
      line.push_back(c);
    else
      too_long = true;
  }
  restore();
  (void)!::write(fd, "\n", 1);
  ::close(fd);
  if (const int sig = interrupted_by) {
    ::raise(sig);  // its usual effect, now that the echo is back
    throw store_error(EINTR, "interrupted while reading the passphrase");
  }
  if (error != 0) throw store_error(error, "reading the passphrase: " + store::errno_text(error));
  if (line.ends_with('\r')) line.pop_back();
  if (too_long)
    throw store_error(EINVAL, "the passphrase typed is over " +
                                  std::to_string(store::k_max_key_file_size) + " bytes");
  if (line.empty()) throw store_error(EINVAL, "no passphrase typed; nothing was changed");
  return line;
}

std::string checked_passphrase(std::string secret, const char* where) {
  if (secret.size() < store::k_min_secret_size)
    throw store_error(EINVAL, std::string("the passphrase from ") + where + " has " +
                                  std::to_string(secret.size()) +
                                  " characters; it needs at least " +
                                  std::to_string(store::k_min_secret_size));
  return secret;
}

}  // namespace

std::string read_key_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    throw store_error(e, "cannot open key file " + path + ": " + store::errno_text(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw store_error(EINVAL, "key file " + path + " is not a regular file");
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    throw store_error(EACCES, "key file " + path + " is open to other users (mode " +
                                  mode_text(st.st_mode) + "); run chmod 600 " + path);
  }
  std::string bytes(store::k_max_key_file_size + 1, '\0');
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw store_error(e, "cannot read key file " + path + ": " + store::errno_text(e));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  bytes.resize(got);
  return store::parse_key_file(bytes, path);
}

std::optional<std::string> volume_secret(const std::string& key_file, const char* env,
                                         const std::string& prompt, bool confirm) {
  if (!key_file.empty()) return read_key_file(key_file);
  if (const char* value = std::getenv(env); value && *value) return checked_passphrase(value, env);
  std::optional<std::string> typed = read_hidden_line(prompt);
  if (!typed) return std::nullopt;
  checked_passphrase(*typed, "the terminal");
  if (confirm) {
    const std::optional<std::string> again = read_hidden_line("Type it again: ");
    if (!again || *again != *typed)
      throw store_error(EINVAL, "the two passphrases typed differ; nothing was changed");
  }
  return typed;
}

void add_volume_secret(const std::filesystem::path& store_dir, const std::string& key_file,
                       store::store_open_options& options) {
  // A key given for a store whose FORMAT lacks the encryption line (an
  // older copy of it): passed on, the database decides.
  if (!store::store::is_encrypted(store_dir)) {
    if (!key_file.empty()) {
      options.key_secret = read_key_file(key_file);
    } else if (const char* value = std::getenv(k_passphrase_env); value && *value) {
      options.key_secret = value;  // for a volume that is not encrypted, ignored
    }
    return;
  }
  options.key_secret =
      volume_secret(key_file, k_passphrase_env,
                    "Passphrase of encrypted volume " + store_dir.string() + ": ", false);
}

}  // namespace densefs::tools
