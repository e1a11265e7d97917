"""The chat's parts that are not widgets: actions, saved files, attachments, the step log."""
