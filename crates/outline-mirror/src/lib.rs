//! Outline's mirror: collections and documents.
