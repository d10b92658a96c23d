"""The output rule: where headscope writes and how. Written once; every writer uses it.

1. **Only new paths or headscope's own directories.** An output directory must be new,
   empty, or a directory headscope wrote earlier, recognised by its manifest
   (:data:`MANIFEST`, ``.headscope-manifest.json``) listing every file headscope wrote
   there — and, for a command, listing that command's own marker file (a report's
   ``.headscope-report``, a steered checkpoint's ``steering.json``, …). Files not in the
   manifest (a user's notes) are never replaced, moved or deleted; headscope refuses to
   write over one. Stale files are removed only if the manifest lists them.
2. **Single output files** (``--out calib.json``) are written to a new path, over an
   empty file, or over an earlier output of the same kind (the writer's `owned` test).
3. **Symbolic links** given as the output are followed (written through; the link stays);
   a dangling link is refused. Inside an output directory headscope never writes
   through, replaces or deletes a link.
4. **FIFOs, sockets and devices** are refused, never opened for writing or replaced.
5. **Nothing half-written; the output never goes missing.** A file is written under a
   temporary name beside its destination (``.NAME.headscope-tmp-XXXXXXXXXXXX``), then
   renamed over it. A directory output is staged in a hidden directory inside itself
   (``.headscope-staging-XXXXXXXXXXXX``); when every file is complete, a commit record
   is written and the files are renamed into place, so the old output stays whole until
   the new one is complete. The next write to the same place cleans up after a killed
   run: temporaries and uncommitted staging are removed, a commit that was under way is
   finished (rolled forward). A temporary still locked (``flock``) by a live process is
   left alone.

Test hook: ``HEADSCOPE_TEST_PAUSE=POINT[:DETAIL]`` makes the process sleep at that point
(``file``: a temporary is complete, before its rename, DETAIL the destination's name
relative to its output; ``commit``: after each file renamed in by a directory commit),
after writing the point to the file named by ``HEADSCOPE_TEST_PAUSE_FLAG``, so a test
can kill it at the worst moment.
"""

from __future__ import annotations

from .commit import recover, refuse_unfinished, unfinished_commit
from .directory import OutputDir, atomic_directory, refuse_foreign_dir
from .files import (MANIFEST, MANIFEST_FORMAT, atomic_write_bytes, atomic_write_text, check_output_file,
                    ensure_writable_dir, is_temporary_name, json_object_with, kind_of, pause_point,
                    read_small_file, starts_with, write_file)

__all__ = ["MANIFEST", "MANIFEST_FORMAT", "OutputDir", "atomic_directory", "atomic_write_bytes",
           "atomic_write_text", "check_output_file", "ensure_writable_dir", "is_temporary_name",
           "json_object_with", "kind_of", "pause_point", "read_small_file", "recover", "refuse_foreign_dir",
           "refuse_unfinished", "starts_with", "unfinished_commit", "write_file"]
