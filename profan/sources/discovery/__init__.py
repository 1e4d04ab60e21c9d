"""Discovery: from the folder the user named to the list of ranks and their files — the walk, format sniffing,
rank naming and the one-line refusals of what is not a profile."""
