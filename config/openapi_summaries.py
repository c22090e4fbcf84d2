"""A one-line summary for each operation of the API docs (`/api/docs/`), in the words a player or
an agent developer looks for; an operation whose view declares its own keeps it. A test fails
when an operation has none."""

from __future__ import annotations

A = "/api/adventures/{adventure_id}/"
W = "/api/worlds/{world_id}/"
SUMMARIES = {
    ("GET", "/api/admin/workers/"): "Workers and their heartbeats (staff)",
    ("GET", "/api/adventures/"): "List your adventures",
    ("POST", "/api/adventures/"): "Start an adventure",
    ("GET", A): "Read an adventure",
    ("PATCH", A): "Change an adventure's settings",
    ("DELETE", A): "Delete an adventure",
    ("GET", A + "actions/{action_id}/"): "Read an action",
    ("PATCH", A + "actions/{action_id}/"): "Edit an action",
    ("DELETE", A + "actions/{action_id}/"): "Delete an action and what follows it",
    ("POST", A + "actions/{action_id}/fork/"): "Fork a new branch from an action",
    ("GET", A + "actions/{action_id}/takes/"): "List the takes of a reply",
    ("POST", A + "actions/{action_id}/takes/"): "Choose a take",
    ("GET", A + "branches/"): "List the branches",
    ("PATCH", A + "branches/{branch_id}/"): "Rename a branch",
    ("DELETE", A + "branches/{branch_id}/"): "Delete a branch",
    ("POST", A + "branches/{branch_id}/checkout/"): "Play a branch",
    ("GET", A + "cards/"): "List the story cards",
    ("POST", A + "cards/"): "Add a story card",
    ("GET", A + "cards/{card_id}/"): "Read a story card",
    ("PATCH", A + "cards/{card_id}/"): "Change a story card",
    ("DELETE", A + "cards/{card_id}/"): "Delete a story card",
    ("GET", A + "cards/export/"): "Export the cards (AI Dungeon format)",
    ("POST", A + "cards/import/"): "Import cards (AI Dungeon format)",
    ("GET", A + "cast/"): "List the cast and their memories' counts",
    ("GET", A + "export/"): "Export the adventure (JSON, with its memories)",
    ("GET", A + "memories/"): "List the memory bank",
    ("POST", A + "memories/"): "Write a memory",
    ("GET", A + "memories/{memory_id}/"): "Read a memory",
    ("PATCH", A + "memories/{memory_id}/"): "Pin, forget, restore or edit a memory",
    ("DELETE", A + "memories/{memory_id}/"): "Delete a memory",
    ("POST", A + "memories/{memory_id}/regenerate/"): "Write a memory again from its passage",
    ("GET", A + "memories/{memory_id}/source/"): "The passage a memory came from",
    ("POST", A + "memories/run/"): "Run the memory pass now",
    ("GET", A + "story/"): "Read the story, a page at a time",
    ("GET", A + "summary/"): "Read the story summary",
    ("PUT", A + "summary/"): "Write your own story summary",
    ("POST", A + "summary/regenerate/"): "Write the summary again",
    ("POST", "/api/adventures/import/"): "Import an adventure (a file from an export)",
    ("POST", "/api/auth/login/"): "Log in",
    ("POST", "/api/auth/logout/"): "Log out",
    ("GET", "/api/auth/me/"): "Who you are",
    ("POST", "/api/auth/password/"): "Change your password",
    ("POST", "/api/auth/signup/"): "Sign up",
    ("GET", "/api/debug/requests/"): "Your model calls, newest first (the debug log)",
    ("GET", "/api/imports/"): "List your imports",
    ("GET", "/api/imports/{job_id}/"): "How an import is going",
    ("GET", "/api/settings/"): "Read your AI settings",
    ("PUT", "/api/settings/"): "Change your AI settings",
    ("PATCH", "/api/settings/"): "Change some of your AI settings",
    ("POST", "/api/settings/test/"): "Test the connection to your model",
    ("GET", "/api/worlds/"): "List your worlds",
    ("POST", "/api/worlds/"): "Make a world for agents",
    ("GET", W): "Read a world",
    ("PATCH", W): "Change a world",
    ("DELETE", W): "Delete a world",
    ("GET", W + "agents/"): "List a world's agents",
    ("DELETE", W + "agents/{agent_id}/"): "Delete an agent and its memories",
    ("GET", W + "agents/{agent_id}/memories/"): "List an agent's memories",
    ("POST", W + "agents/{agent_id}/memories/"): "Give an agent a memory",
    ("PATCH", W + "agents/{agent_id}/memories/{memory_id}/"): "Pin, edit or forget an agent's memory",
    ("DELETE", W + "agents/{agent_id}/memories/{memory_id}/"): "Delete an agent's memory",
    ("POST", W + "agents/{agent_id}/recall/"): "Recall what an agent remembers",
    ("POST", W + "events/"): "Record what happened in the world",
    ("GET", W + "export/"): "Export a world's memories",
    ("POST", "/api/worlds/import/"): "Import a world from its export",
    ("GET", W + "tokens/"): "List a world's tokens",
    ("POST", W + "tokens/"): "Make a world token",
    ("DELETE", W + "tokens/{token_id}/"): "Revoke a world token",
}


def add_summaries(result, generator, request, public):
    """drf-spectacular hook: the summary of each operation that has none of its own."""
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if isinstance(operation, dict) and not operation.get("summary"):
                summary = SUMMARIES.get((method.upper(), path))
                if summary:
                    operation["summary"] = summary
    return result
