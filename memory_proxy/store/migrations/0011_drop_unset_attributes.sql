-- 0011_drop_unset_attributes: a fact's importance and confidence go. Nothing ever set them (extraction
-- does not rate facts; the API and imports only copied what was there), and nothing ranked by them.
-- An export that still holds them imports as before: the import reads only the fields it stores.
ALTER TABLE vectors DROP COLUMN IF EXISTS importance, DROP COLUMN IF EXISTS confidence;
