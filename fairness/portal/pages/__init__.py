"""The HTML pages, by who reads them: public, one's own (me/), staff's (staff/), and the batch
pages of both."""
