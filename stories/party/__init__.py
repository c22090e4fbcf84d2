"""Stories played together: an adventure's members (players and watchers), its invitations, and who
may do what in it (stories.party.members)."""
