//! The task store (in progress).
