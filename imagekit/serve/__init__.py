"""`imagekit run`: an image as a workstation on an engine."""
