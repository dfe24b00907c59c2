"""The JSON APIs (django-ninja): the public one and the admin one."""
