"""Views for people: the Markdown transcript and the HTML pages' rendering. Pure functions
over recorded messages and replay output."""
