/* CPython embedded in a sluice program (`sluice-worker`, `sluice`): the py runtime of
 * runtime.h behind an interpreter this process starts itself, once, when the first py op binds.
 *
 * A process that never runs a py op never starts Python. The first bind starts the interpreter
 * on its pipeline thread (without Python's signal handlers: the program keeps its own), puts
 * the directories given to pyembed_add_path (and PYTHONPATH's, as Python always does) on
 * sys.path, imports numpy, and releases the GIL so every pipeline thread can take it in turn. The
 * interpreter then lives until the process exits. A start that fails (no numpy) fails that bind
 * and every later one with the same message. */
#ifndef SLUICE_PYFN_EMBED_H
#define SLUICE_PYFN_EMBED_H

/* Installs the embedded runtime as this process's Python runtime (pipeline/pyfn.h); call once,
 * at startup, before any pipeline runs. Directories given later through pipe_py_add_path are
 * put on sys.path when the interpreter starts, or at once when it runs already. */
void pyembed_install(void);

#endif
