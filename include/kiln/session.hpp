#pragma once
/// @file session.hpp
/// kiln::clear_session(): back to a fresh process state, like Keras's clear_session.

namespace kiln {

/// Resets kiln's global state so that a program can build a new model from a clean slate:
/// - drops every kiln::function's cached graphs (kiln::clear_caches());
/// - restarts the automatic name counters (kiln::unique_name: the next "Variable" is "Variable"
///   again);
/// - clears the default variable store (kiln::get_variable forgets its variables; they die
///   unless held elsewhere, e.g. by a kiln::Module or your own handles);
/// - empties the named variable collections (kiln::add_to_collection);
/// - restarts the global random stream from kiln::random::global_seed(), so unseeded
///   initializers and random ops repeat the same values as after the last set_global_seed.
/// Variables held by modules and handles stay alive and keep their names and values.
void clear_session();

}  // namespace kiln
