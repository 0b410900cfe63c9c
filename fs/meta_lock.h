// The file system's metadata lock (filesystem::meta_mutex_), with a way
// for readers to pass a commit's round trip to the store.
//
// Every request that changes inodes, names or what a commit is built from
// takes it as a writer (std::lock_guard on the lock itself): exclusive, as
// a plain mutex. A commit on PostgreSQL is a network round trip, which a
// cut-off link can stretch to half a minute; held across it, the lock made
// a stat or an open of a file the kernel already caches wait that long.
//
// So a commit that readers cannot see half done (filesystem::commit says
// which) opens a *window* for the store call alone: it lets go of the
// mutex, readers (reading()) may take it meanwhile, writers wait until the
// committer has taken it back and applied what it committed. Commits are
// therefore still built and applied one at a time, in one order, and no
// writer builds anything from memory a commit is about to change. A reader
// must not change what a commit builds from or applies (records, sizes,
// the names put off, the new-file marks); while no window is open it holds
// the mutex alone, exactly as a writer, and may (window_open() tells).
#pragma once

#include <condition_variable>
#include <mutex>

namespace densefs::fs {

// What other requests may do while a commit waits for the store.
enum class while_committing {
  all_wait,     // nothing takes the lock (the commit holds it throughout)
  readers_pass  // readers take it meanwhile (meta_lock::window)
};

class meta_lock {
 public:
  // A writer: waits out an open window. (Lockable: std::lock_guard,
  // std::unique_lock.)
  void lock() {
    std::unique_lock l(mutex_);
    window_closed_.wait(l, [&] { return !window_; });
    l.release();
  }
  bool try_lock() {
    if (!mutex_.try_lock()) return false;
    if (!window_) return true;
    mutex_.unlock();
    return false;
  }
  void unlock() { mutex_.unlock(); }

  // A reader: passes an open window (std::lock_guard meta(lock.reading())).
  class reader {
   public:
    explicit reader(meta_lock& l) : lock_(l) {}
    void lock() { lock_.mutex_.lock(); }
    bool try_lock() { return lock_.mutex_.try_lock(); }
    void unlock() { lock_.mutex_.unlock(); }

   private:
    meta_lock& lock_;
  };
  reader& reading() { return reader_; }

  // Whether a committer is in its store call; caller holds the mutex.
  bool window_open() const { return window_; }

  // The committer, holding the lock as a writer: readers may take it until
  // this ends, when (also on an exception) it is the committer's again and
  // the writers queued meanwhile wait for its unlock.
  class window {
   public:
    explicit window(meta_lock& l) : lock_(l) {
      lock_.window_ = true;
      lock_.mutex_.unlock();
    }
    ~window() {
      lock_.mutex_.lock();
      lock_.window_ = false;
      lock_.window_closed_.notify_all();
    }
    window(const window&) = delete;
    window& operator=(const window&) = delete;

   private:
    meta_lock& lock_;
  };

 private:
  std::mutex mutex_;
  std::condition_variable window_closed_;
  bool window_ = false;  // guarded by mutex_
  reader reader_{*this};
};

}  // namespace densefs::fs
