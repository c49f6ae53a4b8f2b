// Release the Python GIL for the duration of a kernel when the calling thread holds it.
//
// Operators called through torch.ops keep the GIL while they run; a kernel that takes
// milliseconds would then stall every other Python thread of the process (a model replica's
// event loop, which streams tokens while the engine thread computes the next step).
#pragma once
#include <Python.h>

class MaybeReleaseGil {
 public:
  MaybeReleaseGil() {
    if (Py_IsInitialized() && PyGILState_Check()) state_ = PyEval_SaveThread();
  }
  ~MaybeReleaseGil() {
    if (state_ != nullptr) PyEval_RestoreThread(state_);
  }
  MaybeReleaseGil(const MaybeReleaseGil&) = delete;
  MaybeReleaseGil& operator=(const MaybeReleaseGil&) = delete;

 private:
  PyThreadState* state_ = nullptr;
};
