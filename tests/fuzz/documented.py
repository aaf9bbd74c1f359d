"""What the OpenAPI document promises about an error answer, beyond its status."""


def undocumented_code(responses, status_code, body):
    """Why an error answer's `error` code is not one the document lists for its status, or None.

    Each error response's description is the list of its codes, derived from the error
    declarations (src/wire/answers.rs), so this holds the code to them as well as the status."""
    documented = responses.get(str(status_code))
    if documented is None or not isinstance(body, dict):
        return None  # an undocumented status, or a body that is no error object, is reported apart
    codes = {code.strip() for code in documented.get("description", "").split(",")}
    if body.get("error") not in codes:
        return f"error code {body.get('error')!r} is not among the documented {status_code} codes ({', '.join(sorted(codes))})"
    return None
