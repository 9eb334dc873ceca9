"""Chunked, resumable browser uploads.

The browser opens an upload session per file, sends the file in chunks that each name their byte
offset, and asks the server for the received offset after a dropped connection to resume from
there. Once every file of a version is complete, the page submits the session ids and the registry
takes the assembled files through its ordinary upload service.
"""
