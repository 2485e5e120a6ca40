#pragma once
/// @file
/// The one way keel writes a file that someone may read: a unique temporary name in the same
/// directory, every byte written, fsync, rename onto the final name, fsync of the directory.
/// A crash at any moment leaves the old file or the new one, never a torn one.
#include <functional>
#include <span>
#include <string>
#include <string_view>

/// How keel writes files: atomic publishing, append-only files and owned descriptors.
namespace keel::files {

/// All of `bytes` to `fd`, retrying short writes and EINTR; keel::Error naming `path`.
void write_all(int fd, std::string_view bytes, const std::string& path);
/// fsync of a directory ("" is "."), so a rename inside it survives a crash; keel::Error.
void fsync_directory(const std::string& dir);
/// The directory part of a path: "." for a bare name, "/" for a file in the root.
std::string directory_of(const std::string& path);

/// How publish_file names its temporary, sets the mode and syncs.
struct PublishOptions {
  /// The temporary's name inside the final file's directory; empty: ".<name>.tmp-<pid>-<random>".
  /// It is created exclusively (O_EXCL, never through a symlink), so concurrent writers of one
  /// file never share a temporary.
  std::string temp_name;
  unsigned mode = 0644;  ///< permission bits of the published file
  /// false: the caller fsyncs the directory once after publishing several files.
  bool sync_directory = true;
  /// Called after each step ("open", "written", "synced", "renamed"): crash tests stop there.
  std::function<void(std::string_view step)> hook;
};

/// Publishes `path`; its bytes are the pieces in order (a large file need not be one string). On
/// failure the temporary is removed and keel::Error names the file; keel::InputError when
/// something other than a regular file is at `path` (a device, pipe, link or directory), which
/// the rename would replace.
void publish_file(const std::string& path, std::span<const std::string_view> pieces,
                  const PublishOptions& options = {});
/// Publishes `path` with the bytes `write` puts into the temporary (descriptor, temporary's path),
/// for a file made piece by piece whose pieces are not all held at once.
void publish_file(const std::string& path,
                  const std::function<void(int fd, const std::string& temp)>& write,
                  const PublishOptions& options = {});
/// Publishes `path` with contents `bytes`.
void publish_file(const std::string& path, std::string_view bytes,
                  const PublishOptions& options = {});

}  // namespace keel::files
