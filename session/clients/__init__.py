"""The clients: read a session's journal and write commands into its inbox, never
running the loop themselves."""
