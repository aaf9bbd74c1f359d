DROP TABLE edit_drafts;
